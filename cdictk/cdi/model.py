"""The CDI spec (cdiVersion 0.3.0 to 1.1.0) as dataclasses.

Each attribute is declared once, with what the spec says of it in its field's metadata
(:func:`cdi`): its JSON/YAML key, the value type the reference library reads, when that library
leaves it out of a dump, and the cdiVersion that brought it. The strict decoder, the dumper and the
minimum-version check read :func:`spec_fields`, in the order the classes declare them, which is the
order the spec defines; a test holds the JSON schema's keys to the same fields.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

META = "cdi"  # the key of the spec's metadata in a dataclass field's metadata


class Kind(Enum):
    """The value types a CDI field can have (Go's types, with their ranges)."""

    STR = "a string"
    INT64 = "an integer"
    UINT32 = "an integer from 0 to 4294967295"
    BOOL = "true or false"
    STRS = "a list of strings"
    UINT32S = "a list of integers from 0 to 4294967295"
    STRMAP = "a map of strings"
    OBJ = "a mapping"
    OBJS = "a list of mappings"


class Omit(Enum):
    """When the reference library leaves a field out of what it writes."""

    NEVER = 0
    EMPTY = 1  # Go's omitempty: "", 0, false, empty list or map
    NONE = 2  # a nil pointer


@dataclass(frozen=True, slots=True)
class FieldMeta:
    """What a model attribute's metadata says about its field (:func:`cdi`)."""

    key: str
    kind: Kind
    omit: Omit
    since: str
    required: bool


@dataclass(frozen=True, slots=True)
class SpecField:
    """One field of a model class: its metadata, the attribute that holds it and, for a mapping or a
    list of mappings, the model class of its values (from the attribute's type)."""

    key: str
    attr: str
    kind: Kind
    omit: Omit
    since: str
    required: bool
    cls: type | None = None

    def written(self, value: Any) -> bool:
        """Whether the reference library writes the field with ``value``: its omit rule. A field
        raises the minimum cdiVersion to ``since`` exactly when it is written."""
        if self.omit is Omit.EMPTY:
            return bool(value)
        return self.omit is Omit.NEVER or value is not None


def cdi(
    key: str, kind: Kind, omit: Omit = Omit.EMPTY, *, since: str = "0.3.0", required: bool = False
) -> dict[str, FieldMeta]:
    """The metadata of a dataclass field that the spec knows as ``key``. ``omit`` is when the
    reference library leaves it out of a dump (Go's ``omitempty`` by default), ``since`` the
    cdiVersion that brought it (a spec that writes it needs at least that version) and ``required``
    whether the reference library's JSON schema requires it."""
    return {META: FieldMeta(key, kind, omit, since, required)}


@dataclass(slots=True)
class DeviceNode:
    path: str = field(default="", metadata=cdi("path", Kind.STR, Omit.NEVER, required=True))
    host_path: str = field(default="", metadata=cdi("hostPath", Kind.STR, since="0.5.0"))
    type: str = field(default="", metadata=cdi("type", Kind.STR))
    major: int = field(default=0, metadata=cdi("major", Kind.INT64))
    minor: int = field(default=0, metadata=cdi("minor", Kind.INT64))
    file_mode: int | None = field(default=None, metadata=cdi("fileMode", Kind.UINT32, Omit.NONE))
    permissions: str = field(default="", metadata=cdi("permissions", Kind.STR))
    uid: int | None = field(default=None, metadata=cdi("uid", Kind.UINT32, Omit.NONE))
    gid: int | None = field(default=None, metadata=cdi("gid", Kind.UINT32, Omit.NONE))


@dataclass(slots=True)
class Mount:
    host_path: str = field(default="", metadata=cdi("hostPath", Kind.STR, Omit.NEVER, required=True))
    container_path: str = field(
        default="", metadata=cdi("containerPath", Kind.STR, Omit.NEVER, required=True)
    )
    options: list[str] = field(default_factory=list, metadata=cdi("options", Kind.STRS))
    type: str = field(default="", metadata=cdi("type", Kind.STR, since="0.4.0"))


@dataclass(slots=True)
class Hook:
    hook_name: str = field(default="", metadata=cdi("hookName", Kind.STR, Omit.NEVER, required=True))
    path: str = field(default="", metadata=cdi("path", Kind.STR, Omit.NEVER, required=True))
    args: list[str] = field(default_factory=list, metadata=cdi("args", Kind.STRS))
    env: list[str] = field(default_factory=list, metadata=cdi("env", Kind.STRS))
    timeout: int | None = field(default=None, metadata=cdi("timeout", Kind.INT64, Omit.NONE))


@dataclass(slots=True)
class IntelRdt:
    clos_id: str = field(default="", metadata=cdi("closID", Kind.STR, since="0.7.0"))
    l3_cache_schema: str = field(default="", metadata=cdi("l3CacheSchema", Kind.STR, since="0.7.0"))
    mem_bw_schema: str = field(default="", metadata=cdi("memBwSchema", Kind.STR, since="0.7.0"))
    # None and [] differ: any schemata list, even empty, needs cdiVersion 1.1.0.
    schemata: list[str] | None = field(
        default=None, metadata=cdi("schemata", Kind.STRS, Omit.NONE, since="1.1.0")
    )
    enable_monitoring: bool = field(default=False, metadata=cdi("enableMonitoring", Kind.BOOL, since="1.1.0"))


@dataclass(slots=True)
class NetDevice:
    host_interface_name: str = field(
        default="", metadata=cdi("hostInterfaceName", Kind.STR, Omit.NEVER, since="1.1.0", required=True)
    )
    name: str = field(default="", metadata=cdi("name", Kind.STR, Omit.NEVER, since="1.1.0", required=True))


@dataclass(slots=True)
class ContainerEdits:
    env: list[str] = field(default_factory=list, metadata=cdi("env", Kind.STRS))
    device_nodes: list[DeviceNode] = field(default_factory=list, metadata=cdi("deviceNodes", Kind.OBJS))
    net_devices: list[NetDevice] = field(
        default_factory=list, metadata=cdi("netDevices", Kind.OBJS, since="1.1.0")
    )
    hooks: list[Hook] = field(default_factory=list, metadata=cdi("hooks", Kind.OBJS))
    mounts: list[Mount] = field(default_factory=list, metadata=cdi("mounts", Kind.OBJS))
    intel_rdt: IntelRdt | None = field(
        default=None, metadata=cdi("intelRdt", Kind.OBJ, Omit.NONE, since="0.7.0")
    )
    additional_gids: list[int] = field(
        default_factory=list, metadata=cdi("additionalGids", Kind.UINT32S, since="0.7.0")
    )

    def is_empty(self) -> bool:
        return not (
            self.env
            or self.device_nodes
            or self.net_devices
            or self.hooks
            or self.mounts
            or self.intel_rdt is not None
            or self.additional_gids
        )


@dataclass(slots=True)
class Device:
    name: str = field(default="", metadata=cdi("name", Kind.STR, Omit.NEVER, required=True))
    annotations: dict[str, str] = field(
        default_factory=dict, metadata=cdi("annotations", Kind.STRMAP, since="0.6.0")
    )
    container_edits: ContainerEdits = field(
        default_factory=ContainerEdits, metadata=cdi("containerEdits", Kind.OBJ, Omit.NEVER, required=True)
    )


@dataclass(slots=True)
class Spec:
    cdi_version: str = field(default="", metadata=cdi("cdiVersion", Kind.STR, Omit.NEVER, required=True))
    kind: str = field(default="", metadata=cdi("kind", Kind.STR, Omit.NEVER, required=True))
    annotations: dict[str, str] = field(
        default_factory=dict, metadata=cdi("annotations", Kind.STRMAP, since="0.6.0")
    )
    devices: list[Device] = field(
        default_factory=list, metadata=cdi("devices", Kind.OBJS, Omit.NEVER, required=True)
    )
    container_edits: ContainerEdits = field(
        default_factory=ContainerEdits, metadata=cdi("containerEdits", Kind.OBJ, Omit.NEVER)
    )


MODEL_CLASSES: tuple[type, ...] = (Spec, Device, ContainerEdits, DeviceNode, Mount, Hook, IntelRdt, NetDevice)


def spec_fields(cls: type) -> tuple[SpecField, ...]:
    """The fields of model class ``cls``, in the spec's order, from its attributes' metadata."""
    return _SPEC_FIELDS[cls]


def _fields_of(cls: type) -> tuple[SpecField, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for attr in fields(cls):
        meta: FieldMeta = attr.metadata[META]
        child = _model_class(hints[attr.name]) if meta.kind in (Kind.OBJ, Kind.OBJS) else None
        found.append(SpecField(meta.key, attr.name, meta.kind, meta.omit, meta.since, meta.required, child))
    return tuple(found)


def _model_class(hint: Any) -> type:
    """The model class in ``X``, ``X | None`` or ``list[X]``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is list:
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    if not (isinstance(hint, type) and is_dataclass(hint)):  # a mistake in the model, not in the input
        raise TypeError(f"{hint!r} is no model class")
    return hint


_SPEC_FIELDS = {cls: _fields_of(cls) for cls in MODEL_CLASSES}
