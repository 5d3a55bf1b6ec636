"""The CDI spec (cdiVersion 0.3.0 to 1.1.0) as dataclasses.

``FIELDS`` describes every JSON/YAML key of every class: its attribute, its type, when the reference
library leaves it out of a dump, and its place in the order the spec defines. The strict decoder and
the dumper both work from it, so the two can never disagree about a field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass(slots=True)
class DeviceNode:
    path: str = ""
    host_path: str = ""
    type: str = ""
    major: int = 0
    minor: int = 0
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None


@dataclass(slots=True)
class Mount:
    host_path: str = ""
    container_path: str = ""
    options: list[str] = field(default_factory=list)
    type: str = ""


@dataclass(slots=True)
class Hook:
    hook_name: str = ""
    path: str = ""
    args: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    timeout: int | None = None


@dataclass(slots=True)
class IntelRdt:
    clos_id: str = ""
    l3_cache_schema: str = ""
    mem_bw_schema: str = ""
    # None and [] differ: any schemata list, even empty, needs cdiVersion 1.1.0.
    schemata: list[str] | None = None
    enable_monitoring: bool = False


@dataclass(slots=True)
class NetDevice:
    host_interface_name: str = ""
    name: str = ""


@dataclass(slots=True)
class ContainerEdits:
    env: list[str] = field(default_factory=list)
    device_nodes: list[DeviceNode] = field(default_factory=list)
    net_devices: list[NetDevice] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    intel_rdt: IntelRdt | None = None
    additional_gids: list[int] = field(default_factory=list)

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
    name: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)


@dataclass(slots=True)
class Spec:
    cdi_version: str = ""
    kind: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)


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
class Field:
    key: str
    attr: str
    kind: Kind
    omit: Omit
    cls: type | None = None


FIELDS: dict[type, tuple[Field, ...]] = {
    Spec: (
        Field("cdiVersion", "cdi_version", Kind.STR, Omit.NEVER),
        Field("kind", "kind", Kind.STR, Omit.NEVER),
        Field("annotations", "annotations", Kind.STRMAP, Omit.EMPTY),
        Field("devices", "devices", Kind.OBJS, Omit.NEVER, Device),
        Field("containerEdits", "container_edits", Kind.OBJ, Omit.NEVER, ContainerEdits),
    ),
    Device: (
        Field("name", "name", Kind.STR, Omit.NEVER),
        Field("annotations", "annotations", Kind.STRMAP, Omit.EMPTY),
        Field("containerEdits", "container_edits", Kind.OBJ, Omit.NEVER, ContainerEdits),
    ),
    ContainerEdits: (
        Field("env", "env", Kind.STRS, Omit.EMPTY),
        Field("deviceNodes", "device_nodes", Kind.OBJS, Omit.EMPTY, DeviceNode),
        Field("netDevices", "net_devices", Kind.OBJS, Omit.EMPTY, NetDevice),
        Field("hooks", "hooks", Kind.OBJS, Omit.EMPTY, Hook),
        Field("mounts", "mounts", Kind.OBJS, Omit.EMPTY, Mount),
        Field("intelRdt", "intel_rdt", Kind.OBJ, Omit.NONE, IntelRdt),
        Field("additionalGids", "additional_gids", Kind.UINT32S, Omit.EMPTY),
    ),
    DeviceNode: (
        Field("path", "path", Kind.STR, Omit.NEVER),
        Field("hostPath", "host_path", Kind.STR, Omit.EMPTY),
        Field("type", "type", Kind.STR, Omit.EMPTY),
        Field("major", "major", Kind.INT64, Omit.EMPTY),
        Field("minor", "minor", Kind.INT64, Omit.EMPTY),
        Field("fileMode", "file_mode", Kind.UINT32, Omit.NONE),
        Field("permissions", "permissions", Kind.STR, Omit.EMPTY),
        Field("uid", "uid", Kind.UINT32, Omit.NONE),
        Field("gid", "gid", Kind.UINT32, Omit.NONE),
    ),
    Mount: (
        Field("hostPath", "host_path", Kind.STR, Omit.NEVER),
        Field("containerPath", "container_path", Kind.STR, Omit.NEVER),
        Field("options", "options", Kind.STRS, Omit.EMPTY),
        Field("type", "type", Kind.STR, Omit.EMPTY),
    ),
    Hook: (
        Field("hookName", "hook_name", Kind.STR, Omit.NEVER),
        Field("path", "path", Kind.STR, Omit.NEVER),
        Field("args", "args", Kind.STRS, Omit.EMPTY),
        Field("env", "env", Kind.STRS, Omit.EMPTY),
        Field("timeout", "timeout", Kind.INT64, Omit.NONE),
    ),
    IntelRdt: (
        Field("closID", "clos_id", Kind.STR, Omit.EMPTY),
        Field("l3CacheSchema", "l3_cache_schema", Kind.STR, Omit.EMPTY),
        Field("memBwSchema", "mem_bw_schema", Kind.STR, Omit.EMPTY),
        Field("schemata", "schemata", Kind.STRS, Omit.NONE),
        Field("enableMonitoring", "enable_monitoring", Kind.BOOL, Omit.EMPTY),
    ),
    NetDevice: (
        Field("hostInterfaceName", "host_interface_name", Kind.STR, Omit.NEVER),
        Field("name", "name", Kind.STR, Omit.NEVER),
    ),
}
