"""The driver and GPU facts the legacy prestart hook checks ``NVIDIA_REQUIRE_*`` against, kept in the
parse cache (:mod:`cdictk.startpath.specs.parsecache`), so that a container start reads one JSON entry instead
of asking NVML.

The facts are the driver's (``cuda``, ``driver``) and every GPU's (its ``/dev/nvidia<minor>``, ``arch``
and ``brand``), as :mod:`cdictk.runtime.driverfacts` reads them from NVML when the cache has
none: the slow path, run once per change, which the entry points hand in (``read``). The entry's key
is the node's fingerprint (:mod:`cdictk.startpath.specs.fingerprint`: the driver, its modules, the
GPUs, MIG, the device nodes, the ld cache), the NVML library the spec mounts, and cdictk's version;
the entry holds the library NVML was loaded from and its identity (device, inode, size, modification
and change times), checked against the file at every use: a driver replaced, or its file's owner or
mode changed, is a miss.

An entry is untrusted input: of any other shape it is a miss, never an error. Only complete facts
(no NVML call failed) are kept; a partial answer serves the start that read it.

Which facts a start needs (:func:`select`): no GPU is looked at unless ``arch`` or ``brand`` is
asked, and then only the GPUs whose ``/dev/nvidia<minor>`` the container gets (a MIG device counts as
its parent GPU, as for NVIDIA), in NVML's order; a fact whose NVML call failed fails the start only
when it is asked.
"""

from __future__ import annotations

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.prestart.factshape import identity, ints, shaped
from cdictk.startpath.prestart.require import KEYS, Facts, GpuFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Any

    from cdictk.startpath.misses import DriverFacts
    from cdictk.startpath.specs.parsecache import ParseCache

KIND = "driver-facts"


class NvmlFactsError(HookError):
    """A fact the requirements ask for that NVML could not give: one line."""


def driver_facts(
    cache: ParseCache, mounted: str, minors: Sequence[int], keys: Collection[str], *, read: DriverFacts
) -> Facts:
    """The facts named by ``keys`` for the GPUs ``minors``, from the cache or (a miss) ``read`` anew.

    ``mounted``: the NVML library the spec mounts ("" for none: the host loader's). ``read``: the slow
    path that asks NVML (:attr:`cdictk.startpath.misses.Misses.driver_facts`).
    """
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"unknown requirement keys {sorted(unknown)}")
    if not keys:
        return Facts()
    name, key = _entry(mounted)
    facts = usable(cache.load(name, key))
    if facts is None:
        # The cache missed: NVML asked in a child, once per change of the node.
        facts = read(mounted)
        if complete(facts):
            cache.store(name, key, facts)
    return select(facts, minors, keys)


def _entry(mounted: str) -> tuple[str, list[Any]]:
    from cdictk import __version__  # noqa: PLC0415
    from cdictk.startpath.helpers.roots import Roots  # noqa: PLC0415
    from cdictk.startpath.specs.fingerprint import node_fingerprint  # noqa: PLC0415
    from cdictk.startpath.specs.parsecache import entry_name  # noqa: PLC0415

    return entry_name(KIND, mounted or "/"), [_plain(node_fingerprint(Roots())), mounted, __version__]


def _plain(value: object) -> Any:
    """Tuples as lists, as the cache's JSON gives them back: a key must compare equal after the trip."""
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def usable(entry: object) -> dict[str, Any] | None:
    """A cache entry's facts when they have the shape :func:`shaped` checks, and its library is still
    the file they were read from; None otherwise (a miss)."""
    facts = shaped(entry)
    if facts is None or not isinstance(entry, dict):
        return None
    library, known = entry.get("library"), entry.get("identity")
    if not isinstance(library, str) or not library.startswith("/") or not ints(known, 5):
        return None
    if identity(library) != known:
        return None
    return {**facts, "library": library, "identity": known}


def complete(facts: dict[str, Any]) -> bool:
    """Whether every NVML call the facts come from worked (only such facts are kept)."""
    errors = [facts["cuda"][1], facts["driver"][1], facts["gpus_error"]]
    errors += [error for gpu in facts["gpus"] for error in (gpu[2], gpu[4])]
    return not any(errors)


def select(facts: dict[str, Any], minors: Sequence[int], keys: Collection[str]) -> Facts:
    """The :class:`Facts` for ``keys`` and the GPUs ``minors``; NvmlFactsError for one NVML could not give."""
    chosen = Facts()
    for key in ("cuda", "driver"):
        if key in keys:
            value, error = facts[key]
            if error:
                raise NvmlFactsError(error)
            setattr(chosen, key, value)
    arch, brand = "arch" in keys, "brand" in keys
    if not minors or not (arch or brand):
        return chosen
    if facts["gpus_error"]:
        raise NvmlFactsError(facts["gpus_error"])
    wanted = set(minors)
    for minor, arch_value, arch_error, brand_value, brand_error in facts["gpus"]:
        if minor not in wanted:
            continue
        wanted.discard(minor)
        for asked, error in ((arch, arch_error), (brand, brand_error)):
            if asked and error:
                raise NvmlFactsError(error)
        chosen.gpus.append(GpuFacts(arch_value if arch else "", brand_value if brand else "", minor))
    if wanted:
        missing = ", ".join(f"/dev/nvidia{minor}" for minor in sorted(wanted))
        raise NvmlFactsError(f"NVML lists no GPU for {missing}")
    return chosen
