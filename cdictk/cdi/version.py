"""cdiVersion: the versions the reference library knows, and the oldest one a spec's content allows.

Generators should write the minimum version: every runtime on a node then accepts the spec, while a
newer version than the content needs locks out runtimes that vendor an older CDI library.
"""

from __future__ import annotations

from typing import Any

from cdictk.cdi.model import MODEL_CLASSES, DeviceNode, Kind, Mount, Spec, SpecField, spec_fields
from cdictk.startpath.specs.names import split_kind

KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST_VERSION = "0.3.0"
CURRENT_VERSION = "1.1.0"
# The reference library looks for these in the spec's own edits and the last device's only.
_PATH_FIELDS = {(DeviceNode, "host_path"), (Mount, "type")}


def _index(version: str) -> int:
    return KNOWN_VERSIONS.index(version)


def minimum_version(spec: Spec) -> str:
    """The oldest cdiVersion whose fields and syntax cover everything ``spec`` uses."""
    return _minimum(spec, path_devices_from=0)


def reference_minimum_version(spec: Spec) -> str:
    """The minimum version the reference library (v1.1.0) computes, which runtimes enforce: its checks
    for device-node host paths (0.5.0) and mount types (0.4.0) see the spec's own edits and only the
    last device's. They collect the address of the loop variable, which its module's Go version (1.19)
    gives one copy for the whole loop, so every address is the last device's."""
    return _minimum(spec, path_devices_from=len(spec.devices) - 1)


def _minimum(spec: Spec, path_devices_from: int) -> str:
    """The minimum version, with host paths and mount types looked for in the spec's own edits and
    the devices from index ``path_devices_from`` on.

    Each field written raises it to the version that brought the field (its ``since``); two gates
    are no field's: a dot in the class part of the kind, and a device name that starts with no letter.
    """
    needed = _needed(spec, _index(EARLIEST_VERSION), skip="devices")
    vendor, cls = split_kind(spec.kind)
    if vendor and "." in cls:
        needed = max(needed, _index("0.6.0"))
    if any(_starts_without_letter(device.name) for device in spec.devices):
        needed = max(needed, _index("0.5.0"))
    for i, device in enumerate(spec.devices):
        needed = _needed(device, needed, path_fields=i >= path_devices_from)
    return KNOWN_VERSIONS[needed]


def _needed(obj: Any, needed: int, *, path_fields: bool = True, skip: str = "") -> int:
    """``needed`` (an index in KNOWN_VERSIONS), raised to the ``since`` of every field of ``obj`` that
    its dump writes, but ``skip`` and, unless ``path_fields``, the path fields. A field that can
    raise it no further is not looked at: after the first host path, the other device nodes are not."""
    for field, since, reach, is_path_field in _GATES[type(obj)]:
        if reach <= needed or field.attr == skip or (is_path_field and not path_fields):
            continue
        value = getattr(obj, field.attr)
        if not field.written(value):
            continue
        needed = max(needed, since)
        if field.kind is Kind.OBJ:
            needed = _needed(value, needed, path_fields=path_fields)
        elif field.kind is Kind.OBJS:
            for item in value:
                needed = _needed(item, needed, path_fields=path_fields)
    return needed


_Gates = tuple[tuple[SpecField, int, int, bool], ...]


def _gates(cls: type, known: dict[type, _Gates]) -> _Gates:
    """The fields of ``cls`` that can raise the minimum version, each with the version it brings, the
    newest version it or a field it holds brings, and whether it is a path field."""
    if cls not in known:
        found = []
        for field in spec_fields(cls):
            held = _gates(field.cls, known) if field.cls is not None else ()
            since = _index(field.since)
            reach = max([since, *(gate[2] for gate in held)])
            if reach > _index(EARLIEST_VERSION):
                found.append((field, since, reach, (cls, field.attr) in _PATH_FIELDS))
        known[cls] = tuple(found)
    return known[cls]


_GATES: dict[type, _Gates] = {}
for _cls in MODEL_CLASSES:
    _gates(_cls, _GATES)


def _starts_without_letter(name: str) -> bool:
    # 0.5.0 allowed device names to start with a digit; the library tests "not a letter".
    return bool(name) and not (name[0].isascii() and name[0].isalpha())


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
