"""The slow path a start falls back on where a cache misses (:class:`cdictk.startpath.misses.Misses`).

Each function imports what it runs when it is called, not before: these imports are the start path's
only doors to the rest of cdictk (tests/unit/test_import_cost.py lists them), taken once per change
of the spec dirs or the node.
"""

from __future__ import annotations

from cdictk.startpath.misses import Misses

TYPE_CHECKING = False  # typing imports re: keep both off the start path
if TYPE_CHECKING:
    from typing import Any

    from cdictk.startpath.helpers.roots import Roots


def slow_path() -> Misses:
    """What a start runs where a cache misses: the spec files parsed, the node's spec made, NVML asked."""
    return Misses(scan_specs=scan_specs, node_spec=node_spec, driver_facts=driver_facts)


def scan_specs(dirs: tuple[str, ...], require_dirs: bool, trusted_only: bool) -> dict[str, Any]:
    """The spec dirs' index, every spec file parsed: the parse cache missed."""
    from cdictk.cdi.scan import scan  # noqa: PLC0415

    return scan(dirs, require_dirs=require_dirs, trusted_only=trusted_only)


def node_spec(roots: Roots, kind: str) -> list[Any]:
    """The spec of a node that has none on disk, as ``cdictk cdi generate`` would write it (its
    discovery), in the form :func:`cdictk.cdi.scan.spec_data` gives."""
    from cdictk.node.nvml import NvmlQuery  # noqa: PLC0415
    from cdictk.startpath.shim.inject import IN_MEMORY  # noqa: PLC0415

    # NVML's child first: it loads pynvml while this process imports the discovery.
    with NvmlQuery() as nvml:
        from cdictk.cdi.scan import spec_data  # noqa: PLC0415
        from cdictk.node.modes import Mode  # noqa: PLC0415
        from cdictk.nvcdi.hooks import hook_program  # noqa: PLC0415
        from cdictk.nvcdi.nodespec import node_spec as make_node_spec  # noqa: PLC0415
        from cdictk.nvcdi.options import SpecOptions  # noqa: PLC0415

        vendor, _, cls = kind.partition("/")
        options = SpecOptions(vendor=vendor, cls=cls, hook_program=hook_program())
        return spec_data(make_node_spec(roots, Mode.AUTO, options, where=IN_MEMORY, nvml=nvml).spec)


def driver_facts(mounted: str) -> dict[str, Any]:
    """The driver's and GPUs' facts, NVML asked in a child (``mounted``: the NVML library the spec
    mounts, "" for the host loader's): the parse cache missed."""
    from cdictk.runtime.driverfacts import read_facts  # noqa: PLC0415

    return read_facts(mounted)
