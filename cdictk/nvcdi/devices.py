"""The device kinds of a spec: each turns the node's facts into named devices.

A generate mode names the kinds it wants (:data:`cdictk.node.modes.MODES`). ``gpus`` gives a device per
full GPU (its node, its DRM card and render nodes and their by-path links) and per MIG device (the
parent's node and its two capability nodes, and the parent's DRM nodes and links for a ``+gfx``
profile, whose instances do graphics), as ``--device-id`` selects them. The display GPU of a DGX
Station ("DGX Display") is no device, as in NVIDIA's enumeration, unless the options include it.
``all-nodes`` gives one ``all`` device with every NVIDIA node (management mode). ``dxg`` (WSL2) is
one ``all`` device with ``/dev/dxg``; ``csv-nodes`` (Jetson) is device ``0`` with the nodes the CSV
files list; ``imex-channels`` a device per IMEX channel, named by its number; ``nvswitch``, ``gds``,
``mofed`` and ``gdrcopy`` one ``all`` device each with their driver's nodes. A kind that finds nothing
is an error, so that no mode writes a spec without devices. A new kind is a function here and a row
in :data:`DEVICES`.
"""

from __future__ import annotations

from collections.abc import Callable

from cdictk.node import devnodes, othernodes, wsl
from cdictk.node.devnodes import cap_node, stat_node
from cdictk.node.facts import NodeFacts, module_hint
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.nvcdi import naming
from cdictk.nvcdi.naming import Strategy
from cdictk.nvcdi.options import Parts, SpecOptions
from cdictk.startpath.helpers.errors import CdictkError

ALL_DEVICE = "all"
DISPLAY_GPU_NAMES = frozenset({"DGX Display", "NVIDIA DGX Display"})  # a DGX Station's display GPU
Named = tuple[list[str], Parts]  # a device's names (one per naming strategy) and its parts


def gpu_devices(facts: NodeFacts, options: SpecOptions, warnings: list[str]) -> list[Named]:
    """A device per full GPU and per MIG device that ``--device-id`` selects (all by default)."""
    named: list[Named] = []
    wanted = _select(facts, options.device_ids)
    for gpu in facts.gpus:
        if gpu.name in DISPLAY_GPU_NAMES and not options.include_display_gpus:
            warnings.append(
                f"GPU {gpu.index} ({gpu.name}) drives the workstation's displays: no device for it "
                "(--include-display-gpus gives it one)"
            )
            continue
        if Strategy.UUID in options.strategies and not gpu.uuid:
            warnings.append(f"GPU {gpu.index} has no UUID (procfs did not list one): no uuid name for it")
        if gpu.mig_enabled and not gpu.migs and (gpu.index, None) in wanted:
            warnings.append(f"GPU {gpu.index} ({gpu.uuid}) is in MIG mode without MIG devices: left out")
        if gpu.mig_enabled:
            for mig in gpu.migs:
                key = (gpu.index, mig.index)
                if key in wanted and (parts := _mig_parts(facts, gpu, mig, warnings)) is not None:
                    named.append((naming.mig_names(mig, options.strategies), parts))
        elif (gpu.index, None) in wanted and (parts := _gpu_parts(facts, gpu)) is not None:
            named.append((naming.gpu_names(gpu, options.strategies), parts))
    return named


def all_nodes_device(facts: NodeFacts, options: SpecOptions, warnings: list[str]) -> list[Named]:
    """One ``all`` device with every NVIDIA node: GPUs, control nodes, caps and IMEX channels."""
    nodes = devnodes.all_nvidia_nodes(facts.roots)
    if not nodes:
        raise CdictkError(
            "", "", f"no NVIDIA device nodes under {facts.roots.in_dev('/dev')}" + module_hint(facts.modules)
        )
    return [([ALL_DEVICE], Parts(nodes=nodes))]


def dxg_device(facts: NodeFacts, options: SpecOptions, warnings: list[str]) -> list[Named]:
    """WSL2: every GPU is behind /dev/dxg, so one ``all`` device."""
    _one_device_only(options, "WSL2")
    node = stat_node(facts.roots, wsl.DXG)
    if node is None:
        raise CdictkError(
            "", "", f"no {facts.roots.in_dev(wsl.DXG)}: this WSL2 distribution has no GPU (GPU support off?)"
        )
    return [([ALL_DEVICE], Parts(nodes=[node]))]


def csv_device(facts: NodeFacts, options: SpecOptions, warnings: list[str]) -> list[Named]:
    """A Jetson's integrated GPU: device ``0`` with the nodes its CSV files list."""
    unknown = [device_id for device_id in options.device_ids if device_id not in ("0", "all")]
    if unknown:
        raise CdictkError("", "--device-id", f"a Jetson has device 0 (or all) only, not {', '.join(unknown)}")
    nodes = facts.common.device_nodes
    if not nodes:
        raise CdictkError("", "", "the CSV files name no device node present under " + facts.roots.dev)
    # No UUID without NVML: the index names alone, "0" when only uuid was asked for.
    by_strategy = {Strategy.INDEX: "0", Strategy.TYPE_INDEX: "gpu0"}
    names = [by_strategy[strategy] for strategy in options.strategies if strategy in by_strategy]
    return [(list(dict.fromkeys(names)) or ["0"], Parts(nodes=list(nodes)))]


def imex_devices(facts: NodeFacts, options: SpecOptions, warnings: list[str]) -> list[Named]:
    """A device per IMEX channel (``0``, ``1``, ...), or those --device-id names (N or channelN)."""
    channels = othernodes.imex_channels(facts.roots)
    where = facts.roots.in_dev(othernodes.IMEX_DIR)
    wanted = set(channels)
    if options.device_ids and "all" not in options.device_ids:
        ids = {device_id: othernodes.imex_channel_id(device_id) for device_id in options.device_ids}
        bad = [device_id for device_id, number in ids.items() if number is None]
        if bad:
            raise CdictkError(
                "", "--device-id", f"not an IMEX channel (N or channelN, N <= 1048575): {', '.join(bad)}"
            )
        wanted = {number for number in ids.values() if number is not None}
        absent = sorted(wanted - set(channels))
        if absent:
            raise CdictkError("", "--device-id", f"no such IMEX channel in {where}: {absent[0]}")
    if not channels:
        raise CdictkError("", "", f"no IMEX channels in {where} (is nvidia-imex set up?)")
    return [([str(number)], Parts(nodes=[node])) for number, node in channels.items() if number in wanted]


def _gated(mode: str, what: str) -> Callable[[NodeFacts, SpecOptions, list[str]], list[Named]]:
    def devices(facts: NodeFacts, options: SpecOptions, warnings: list[str]) -> list[Named]:
        _one_device_only(options, f"--mode {mode}")
        nodes = othernodes.matching_nodes(facts.roots, othernodes.GATED[mode])
        if not nodes:
            looked = othernodes.gated_pattern_text(mode)
            root = "" if facts.roots.dev == "/" else f" under {facts.roots.dev}"
            raise CdictkError("", "", f"no {what} nodes ({looked}){root}")
        return [([ALL_DEVICE], Parts(nodes=nodes))]

    return devices


def _one_device_only(options: SpecOptions, what: str) -> None:
    if any(device_id != ALL_DEVICE for device_id in options.device_ids):
        raise CdictkError("", "--device-id", f"does not apply to {what} (one 'all' device)")


DEVICES: dict[str, Callable[[NodeFacts, SpecOptions, list[str]], list[Named]]] = {
    "gpus": gpu_devices,
    "all-nodes": all_nodes_device,
    "dxg": dxg_device,
    "csv-nodes": csv_device,
    "imex-channels": imex_devices,
    "nvswitch": _gated("nvswitch", "NVSwitch"),
    "gds": _gated("gds", "GPUDirect Storage (nvidia-fs)"),
    "mofed": _gated("mofed", "InfiniBand (MOFED)"),
    "gdrcopy": _gated("gdrcopy", "GDRCopy"),
}


def _select(facts: NodeFacts, device_ids: tuple[str, ...]) -> set[tuple[int, int | None]]:
    """(GPU index, MIG slot or None) of the devices ``--device-id`` asks for (all of them by default)."""
    by_id: dict[str, tuple[int, int | None]] = {}
    for gpu in facts.gpus:
        by_id[str(gpu.index)] = (gpu.index, None)
        for mig in gpu.migs:
            by_id[f"{gpu.index}:{mig.index}"] = (gpu.index, mig.index)
            if mig.uuid:
                by_id[mig.uuid] = (gpu.index, mig.index)
        if gpu.uuid:
            by_id[gpu.uuid] = (gpu.index, None)
    every = set(by_id.values())
    if not device_ids or "all" in device_ids:
        return every
    unknown = [device_id for device_id in device_ids if device_id not in by_id]
    if unknown:
        raise CdictkError("", "--device-id", f"no such GPU or MIG device: {', '.join(unknown)}")
    selected = {by_id[device_id] for device_id in device_ids}
    # Asking for a MIG-mode GPU by its own id means all of its MIG devices.
    return selected | {(gpu, mig) for gpu, mig in every if mig is not None and (gpu, None) in selected}


def _gpu_parts(facts: NodeFacts, gpu: Gpu) -> Parts | None:
    node = facts.gpu_nodes.get(gpu.minor)
    if node is None:
        return None
    drm = facts.drm.get(gpu.bus_id)
    if drm is None:
        return Parts(nodes=[node])
    return Parts(nodes=[node, *drm.nodes], links=list(drm.links))


def _mig_parts(facts: NodeFacts, gpu: Gpu, mig: MigDevice, warnings: list[str]) -> Parts | None:
    parent = facts.gpu_nodes.get(gpu.minor)
    minors = facts.mig_minors
    label = f"MIG device {gpu.index}:{mig.index} ({mig.uuid})"
    if parent is None:
        return None
    if minors is None:
        warnings.append(f"{label}: /proc/driver/nvidia-caps/mig-minors is missing; left out")
        return None
    gi_minor = minors.access.get((gpu.minor, mig.gi, None))
    ci_minor = minors.access.get((gpu.minor, mig.gi, mig.ci))
    if gi_minor is None or ci_minor is None:
        warnings.append(
            f"{label}: no capability minors for GI {mig.gi} / CI {mig.ci} in mig-minors; left out"
        )
        return None
    caps = [cap_node(facts.roots, minor, facts.caps_major) for minor in (gi_minor, ci_minor)]
    if any(cap is None for cap in caps):
        warnings.append(
            f"{label}: nvidia-caps nodes missing and no nvidia-caps major in /proc/devices; left out"
        )
        return None
    parts = Parts(nodes=[parent, *(cap for cap in caps if cap is not None)])
    drm = facts.drm.get(gpu.bus_id)
    if drm is not None and "gfx" in _attributes(mig.profile):  # 1g.24gb+gfx: graphics in the instance
        parts.nodes += drm.nodes
        parts.links += drm.links
    return parts


def _attributes(profile: str) -> set[str]:
    """A MIG profile's attributes: ``1g.24gb+gfx`` has gfx, ``1g.10gb+me,gfx`` (NVIDIA joins several
    with commas) has me and gfx."""
    _, _, attributes = profile.partition("+")
    return {part for part in attributes.replace("+", ",").split(",") if part}
