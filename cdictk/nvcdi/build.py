"""Node facts -> one CDI spec: a device per full GPU and per MIG device, ``all``, and common edits.

The output is a function of the facts and the options alone: entries are deduplicated and sorted, so two
generations on an unchanged node give the same bytes (which is what ``--check`` compares).
"""

from __future__ import annotations

import os

from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.version import minimum_version
from cdictk.node.devnodes import NodeInfo
from cdictk.node.facts import NodeFacts
from cdictk.node.modes import MODES
from cdictk.nvcdi import edits, hooks
from cdictk.nvcdi.cdiversion import fit_version
from cdictk.nvcdi.devices import ALL_DEVICE, DEVICES, Named
from cdictk.nvcdi.options import Parts, SpecOptions
from cdictk.sorting import natural_key
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import join


def build_spec(facts: NodeFacts, options: SpecOptions) -> tuple[Spec, list[str]]:
    """The spec and the warnings met while building it."""
    warnings: list[str] = []
    named: list[Named] = []
    for kind in MODES[facts.mode].devices:
        named += DEVICES[kind](facts, options, warnings)
    if not named:
        raise CdictkError("", "", "no devices to write: every GPU was left out or filtered away")

    devices = [
        Device(name=name, container_edits=_device_edits(parts, options))
        for names, parts in named
        for name in names
    ]
    taken = {device.name for device in devices}
    if options.all_device and ALL_DEVICE not in taken:
        merged = Parts()
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


def _sorted_nodes(nodes: list[NodeInfo]) -> list[NodeInfo]:
    """Unique by path; /dev/nvidiaN before the nodes in subdirectories, then in natural order."""
    unique = {node.path: node for node in nodes}
    return [unique[path] for path in sorted(unique, key=lambda path: (path.count("/"), natural_key(path)))]


def _device_edits(parts: Parts, options: SpecOptions) -> ContainerEdits:
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
    found = facts.common
    control = _sorted_nodes(found.nodes)
    mounts = [
        edits.mount(library.path, join(facts.roots.driver, library.path), edits.READ_ONLY)
        for library in found.libraries
    ]
    mounts += [edits.file_mount(driver_file) for driver_file in found.files]
    unique = {mount.container_path: mount for mount in mounts}
    library_dirs = sorted({os.path.dirname(library.path) for library in found.libraries})
    # NVIDIA_VISIBLE_DEVICES=void: a legacy prestart hook must leave a CDI-injected container alone.
    env = ["NVIDIA_VISIBLE_DEVICES=void"]
    cuda_dirs = [
        os.path.dirname(lib.path)
        for lib in found.libraries
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
        recipe = MODES[facts.mode]
        # CUDA compat compares the host driver's version with the image's compat libcuda: no version, no hook.
        unknown = set() if facts.driver_version else {hooks.ENABLE_CUDA_COMPAT}
        result.hooks = hooks.common_hooks(
            options.hook_program,
            links=found.links,
            device_links=device_links,
            library_dirs=library_dirs,
            driver_version=facts.driver_version,
            ldconfig_path=options.ldconfig_path,
            disabled=options.disabled_hooks | recipe.without_hooks | unknown,
        )
    return result
