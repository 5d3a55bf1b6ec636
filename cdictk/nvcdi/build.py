"""Node facts -> one CDI spec: a device per full GPU and per MIG device, ``all``, and common edits.

The output is a function of the facts and the options alone: entries are deduplicated and sorted, so two
generations on an unchanged node give the same bytes (which is what ``--check`` compares).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.version import minimum_version
from cdictk.errors import CdictkError
from cdictk.node.devnodes import NodeInfo, cap_node
from cdictk.node.facts import Mode, NodeFacts
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.node.roots import join
from cdictk.nvcdi import edits, hooks, naming
from cdictk.nvcdi.naming import Strategy
from cdictk.nvcdi.target import fit_version
from cdictk.sorting import natural_key

ALL_DEVICE = "all"


@dataclass(frozen=True, slots=True)
class SpecOptions:
    vendor: str = "nvidia.com"
    cls: str = "gpu"
    strategies: tuple[Strategy, ...] = naming.DEFAULT_STRATEGIES
    hook_program: hooks.HookProgram | None = None  # None: no hooks at all
    disabled_hooks: frozenset[str] = frozenset()
    ldconfig_path: str | None = None
    all_device: bool = True
    device_ids: tuple[str, ...] = ()  # empty: every device
    target_version: str | None = None  # the newest cdiVersion the spec's readers accept


@dataclass(slots=True)
class _Parts:
    """One device's nodes and links before they become edits (so ``all`` can merge them)."""

    nodes: list[NodeInfo] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)


def build_spec(facts: NodeFacts, options: SpecOptions) -> tuple[Spec, list[str]]:
    """The spec and the warnings met while building it."""
    warnings: list[str] = []
    named: list[tuple[list[str], _Parts]] = []
    if facts.mode is Mode.MANAGEMENT:
        named.append(([ALL_DEVICE], _Parts(nodes=list(facts.management_nodes))))
    else:
        wanted = _select(facts, options.device_ids)
        for gpu in facts.gpus:
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
    if not named:
        raise CdictkError("", "", "no devices to write: every GPU was left out or filtered away")

    devices = [
        Device(name=name, container_edits=_device_edits(parts, options))
        for names, parts in named
        for name in names
    ]
    taken = {device.name for device in devices}
    if options.all_device and ALL_DEVICE not in taken:
        merged = _Parts()
        for _, parts in named:
            merged.nodes += parts.nodes
            merged.links += parts.links
        devices.append(Device(name=ALL_DEVICE, container_edits=_device_edits(merged, options)))
    devices.sort(key=lambda device: (device.name == ALL_DEVICE, natural_key(device.name)))

    device_links = [link for _, parts in named for link in parts.links]
    spec = Spec(
        kind=f"{options.vendor}/{options.cls}",
        devices=devices,
        container_edits=_common(facts, options, device_links),
    )
    spec.cdi_version = minimum_version(spec)
    if options.target_version is not None:
        warnings += fit_version(spec, options.target_version)
    return spec, warnings


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


def _gpu_parts(facts: NodeFacts, gpu: Gpu) -> _Parts | None:
    node = facts.gpu_nodes.get(gpu.minor)
    if node is None:
        return None
    drm = facts.drm.get(gpu.bus_id)
    if drm is None:
        return _Parts(nodes=[node])
    return _Parts(nodes=[node, *drm.nodes], links=list(drm.links))


def _mig_parts(facts: NodeFacts, gpu: Gpu, mig: MigDevice, warnings: list[str]) -> _Parts | None:
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
    return _Parts(nodes=[parent, *(cap for cap in caps if cap is not None)])


def _sorted_nodes(nodes: list[NodeInfo]) -> list[NodeInfo]:
    """Unique by path; /dev/nvidiaN before the nodes in subdirectories, then in natural order."""
    unique = {node.path: node for node in nodes}
    return [unique[path] for path in sorted(unique, key=lambda path: (path.count("/"), natural_key(path)))]


def _device_edits(parts: _Parts, options: SpecOptions) -> ContainerEdits:
    nodes = _sorted_nodes(parts.nodes)
    result = ContainerEdits(
        device_nodes=[edits.device_node(node) for node in nodes], additional_gids=edits.group_only_gids(nodes)
    )
    program = options.hook_program
    if (
        parts.links
        and program is not None
        and not program.batch  # the batched common hook makes them
        and hooks.CREATE_SYMLINKS not in options.disabled_hooks
    ):
        result.hooks.append(program.hook(hooks.CREATE_SYMLINKS, hooks.link_args(parts.links)))
    return result


def _common(facts: NodeFacts, options: SpecOptions, device_links: list[tuple[str, str]]) -> ContainerEdits:
    control = _sorted_nodes(facts.control_nodes)
    libraries = facts.libraries
    mounts = [
        edits.mount(library.path, join(facts.roots.driver, library.path), edits.READ_ONLY)
        for library in libraries.libraries
    ]
    mounts += [edits.file_mount(driver_file) for driver_file in facts.files.files]
    unique = {mount.container_path: mount for mount in mounts}
    library_dirs = sorted({os.path.dirname(library.path) for library in libraries.libraries})
    # NVIDIA_VISIBLE_DEVICES=void: a legacy prestart hook must leave a CDI-injected container alone.
    env = ["NVIDIA_VISIBLE_DEVICES=void"]
    cuda_dirs = [
        os.path.dirname(lib.path)
        for lib in libraries.libraries
        if lib.path.endswith(f"/libcuda.so.{facts.driver_version}")
    ]
    if cuda_dirs:
        env.insert(0, "NVIDIA_CTK_LIBCUDA_DIR=" + ":".join(cuda_dirs))
    result = ContainerEdits(
        env=env,
        device_nodes=[edits.device_node(node) for node in control],
        mounts=[unique[path] for path in sorted(unique)],
        additional_gids=edits.group_only_gids(control),
    )
    if options.hook_program is not None:
        result.hooks = hooks.common_hooks(
            options.hook_program,
            links=libraries.links + facts.files.links,
            device_links=device_links,
            library_dirs=library_dirs,
            driver_version=facts.driver_version,
            ldconfig_path=options.ldconfig_path,
            # A management container is there to manage the device nodes.
            disabled=options.disabled_hooks
            | ({hooks.DISABLE_DEVICE_NODE_MODIFICATION} if facts.mode is Mode.MANAGEMENT else set()),
        )
    return result
