"""cdiVersion: the versions the reference library knows, and the oldest one a spec's content allows.

Generators should write the minimum version: every runtime on a node then accepts the spec, while a
newer version than the content needs locks out runtimes that vendor an older CDI library.
"""

from __future__ import annotations

from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.names import split_kind

KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST_VERSION = "0.3.0"
CURRENT_VERSION = "1.1.0"


def _index(version: str) -> int:
    return KNOWN_VERSIONS.index(version)


def minimum_version(spec: Spec) -> str:
    """The oldest cdiVersion whose fields and syntax cover everything ``spec`` uses."""
    return _minimum(spec, spec.devices)


def reference_minimum_version(spec: Spec) -> str:
    """The minimum version the reference library (v1.1.0) computes, which runtimes enforce: its checks
    for device-node host paths (0.5.0) and mount types (0.4.0) see the spec's own edits and only the
    last device's. They collect the address of the loop variable, which its module's Go version (1.19)
    gives one copy for the whole loop, so every address is the last device's."""
    return _minimum(spec, spec.devices[-1:])


def _minimum(spec: Spec, path_devices: list[Device]) -> str:
    """The minimum version, with host paths and mount types looked for in ``path_devices`` only."""
    every_edits = [spec.container_edits, *(device.container_edits for device in spec.devices)]
    path_edits = [spec.container_edits, *(device.container_edits for device in path_devices)]
    if any(_needs_1_1_0(edits) for edits in every_edits):
        return "1.1.0"
    if any(edits.intel_rdt is not None or edits.additional_gids for edits in every_edits):
        return "0.7.0"
    vendor, cls = split_kind(spec.kind)
    if spec.annotations or any(device.annotations for device in spec.devices) or (vendor and "." in cls):
        return "0.6.0"
    host_paths = any(node.host_path for edits in path_edits for node in edits.device_nodes)
    if host_paths or any(_starts_without_letter(device.name) for device in spec.devices):
        return "0.5.0"
    if any(mount.type for edits in path_edits for mount in edits.mounts):
        return "0.4.0"
    return EARLIEST_VERSION


def _starts_without_letter(name: str) -> bool:
    # 0.5.0 allowed device names to start with a digit; the library tests "not a letter".
    return bool(name) and not (name[0].isascii() and name[0].isalpha())


def _needs_1_1_0(edits: ContainerEdits) -> bool:
    rdt = edits.intel_rdt
    return bool(edits.net_devices) or (
        rdt is not None and (rdt.schemata is not None or rdt.enable_monitoring)
    )


def version_problem(spec: Spec) -> str | None:
    """Why the spec's declared cdiVersion is not acceptable, or None."""
    declared = spec.cdi_version.removeprefix("v")
    if declared not in KNOWN_VERSIONS:
        return f'unknown version "{spec.cdi_version}" (known: {", ".join(KNOWN_VERSIONS[2:])})'
    needed = minimum_version(spec)
    if _index(declared) < _index(needed):
        return f"version {spec.cdi_version} is too old: the spec's content needs at least {needed}"
    return None


def is_newer(version: str, than: str) -> bool:
    return _index(version.removeprefix("v")) > _index(than.removeprefix("v"))
