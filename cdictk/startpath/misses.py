"""What a start does when a cache misses: :class:`Misses`, the slow path handed in.

A start reads what the slow path prepared (the spec dirs' index, the node's spec made in memory, the
driver's facts) from the parse cache. When an entry is missing or stale, the start makes it itself,
once per change, with code that parses YAML, asks NVML and reads ELF headers: code that lives outside
this package and may use anything. The entry points (:mod:`cdictk.entrypoints`) hand that code in as
three callables, so the start path never imports the slow path and no package of cdictk imports one
that imports it back.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing imports re: keep both off the start path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from cdictk.startpath.helpers.roots import Roots

    # The index of the spec dirs, every spec file parsed (dirs, require_dirs, trusted_only).
    ScanSpecs = Callable[[tuple[str, ...], bool, bool], dict[str, Any]]
    # The node's spec as ``cdictk cdi generate`` would write it (roots, kind), as the index stores it.
    NodeSpec = Callable[[Roots, str], list[Any]]
    # The driver's and GPUs' facts, NVML asked in a child (the NVML library the spec mounts).
    DriverFacts = Callable[[str], dict[str, Any]]


class Misses:
    """The slow path a start falls back on when a cache misses: ``scan_specs`` (the spec dirs' index),
    ``node_spec`` (the spec of a node that has none on disk) and ``driver_facts`` (what the legacy
    prestart hook checks ``NVIDIA_REQUIRE_*`` against)."""

    __slots__ = ("driver_facts", "node_spec", "scan_specs")

    def __init__(self, *, scan_specs: ScanSpecs, node_spec: NodeSpec, driver_facts: DriverFacts) -> None:
        self.scan_specs = scan_specs
        self.node_spec = node_spec
        self.driver_facts = driver_facts
