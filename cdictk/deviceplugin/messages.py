"""The device plugin API's messages (v1beta1) as frozen dataclasses, shaped as deviceplugin.proto, and
its constants: where the kubelet's sockets are, the version, the health values."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cdictk.deviceplugin.protocol import Codec, Schema

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proto", "deviceplugin.proto")
SCHEMA = Schema(PROTO.removesuffix(".proto") + ".binpb")
CODEC = Codec(SCHEMA)

VERSION = "v1beta1"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"  # the kubelet's; plugins register from there
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


@dataclass(frozen=True, slots=True)
class Empty:
    pass


@dataclass(frozen=True, slots=True)
class DevicePluginOptions:
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    version: str
    endpoint: str
    resource_name: str
    options: DevicePluginOptions | None = None


@dataclass(frozen=True, slots=True)
class NUMANode:
    ID: int


@dataclass(frozen=True, slots=True)
class TopologyInfo:
    nodes: list[NUMANode] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Device:
    ID: str
    health: str
    topology: TopologyInfo | None = None


@dataclass(frozen=True, slots=True)
class ListAndWatchResponse:
    devices: list[Device] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ContainerPreferredAllocationRequest:
    available_deviceIDs: list[str] = field(default_factory=list)
    must_include_deviceIDs: list[str] = field(default_factory=list)
    allocation_size: int = 0


@dataclass(frozen=True, slots=True)
class PreferredAllocationRequest:
    container_requests: list[ContainerPreferredAllocationRequest] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ContainerPreferredAllocationResponse:
    deviceIDs: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PreferredAllocationResponse:
    container_responses: list[ContainerPreferredAllocationResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ContainerAllocateRequest:
    devices_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AllocateRequest:
    container_requests: list[ContainerAllocateRequest] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True, slots=True)
class CDIDevice:
    name: str


@dataclass(frozen=True, slots=True)
class ContainerAllocateResponse:
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    devices: list[DeviceSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[CDIDevice] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AllocateResponse:
    container_responses: list[ContainerAllocateResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PreStartContainerRequest:
    devices_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PreStartContainerResponse:
    pass
