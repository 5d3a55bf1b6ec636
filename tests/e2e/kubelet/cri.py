"""The CRI (runtime.v1) as the kubelet speaks it to containerd: typed messages and a client.

The messages are dataclasses named and shaped as in cri.proto (compiled to cri.binpb), turned into
protobuf by :class:`cdictk.deviceplugin.protocol.Codec`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from cdictk.deviceplugin.protocol import Codec, Schema

SCHEMA = Schema(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cri.binpb"))
CODEC = Codec(SCHEMA)
T = TypeVar("T")

POD, CONTAINER, NODE = 0, 1, 2  # NamespaceMode: the pod's, the container's own, the node's (hostPID...)
PROPAGATION_PRIVATE, PROPAGATION_HOST_TO_CONTAINER, PROPAGATION_BIDIRECTIONAL = 0, 1, 2
CONTAINER_RUNNING, CONTAINER_EXITED = 1, 2


@dataclass(frozen=True)
class VersionRequest:
    version: str


@dataclass(frozen=True)
class VersionResponse:
    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True)
class NamespaceOption:
    network: int = 0
    pid: int = 0
    ipc: int = 0


@dataclass(frozen=True)
class LinuxSandboxSecurityContext:
    namespace_options: NamespaceOption | None = None
    privileged: bool = False


@dataclass(frozen=True)
class LinuxPodSandboxConfig:
    cgroup_parent: str = ""
    security_context: LinuxSandboxSecurityContext | None = None


@dataclass(frozen=True)
class PodSandboxMetadata:
    name: str
    uid: str
    namespace: str
    attempt: int = 0


@dataclass(frozen=True)
class PodSandboxConfig:
    metadata: PodSandboxMetadata | None
    hostname: str = ""
    log_directory: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    linux: LinuxPodSandboxConfig | None = None


@dataclass(frozen=True)
class RunPodSandboxRequest:
    config: PodSandboxConfig | None
    runtime_handler: str = ""


@dataclass(frozen=True)
class RunPodSandboxResponse:
    pod_sandbox_id: str


@dataclass(frozen=True)
class StopPodSandboxRequest:
    pod_sandbox_id: str


@dataclass(frozen=True)
class StopPodSandboxResponse:
    pass


@dataclass(frozen=True)
class RemovePodSandboxRequest:
    pod_sandbox_id: str


@dataclass(frozen=True)
class RemovePodSandboxResponse:
    pass


@dataclass(frozen=True)
class PodSandboxStatusRequest:
    pod_sandbox_id: str
    verbose: bool = False


@dataclass(frozen=True)
class PodSandboxNetworkStatus:
    ip: str


@dataclass(frozen=True)
class PodSandboxStatus:
    id: str
    metadata: PodSandboxMetadata | None
    state: int
    network: PodSandboxNetworkStatus | None
    runtime_handler: str


@dataclass(frozen=True)
class PodSandboxStatusResponse:
    status: PodSandboxStatus | None


@dataclass(frozen=True)
class ListPodSandboxRequest:
    pass


@dataclass(frozen=True)
class PodSandbox:
    id: str
    metadata: PodSandboxMetadata | None
    state: int


@dataclass(frozen=True)
class ListPodSandboxResponse:
    items: list[PodSandbox]


@dataclass(frozen=True)
class ImageSpec:
    image: str
    user_specified_image: str = ""


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    readonly: bool = False
    selinux_relabel: bool = False
    propagation: int = PROPAGATION_PRIVATE


@dataclass(frozen=True)
class Device:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class CDIDevice:
    name: str


@dataclass(frozen=True)
class Capability:
    add_capabilities: list[str] = field(default_factory=list)
    drop_capabilities: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LinuxContainerResources:
    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit_in_bytes: int = 0
    oom_score_adj: int = 0


@dataclass(frozen=True)
class LinuxContainerSecurityContext:
    capabilities: Capability | None = None
    privileged: bool = False
    namespace_options: NamespaceOption | None = None
    readonly_rootfs: bool = False
    no_new_privs: bool = False
    masked_paths: list[str] = field(default_factory=list)
    readonly_paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LinuxContainerConfig:
    resources: LinuxContainerResources | None = None
    security_context: LinuxContainerSecurityContext | None = None


@dataclass(frozen=True)
class ContainerMetadata:
    name: str
    attempt: int = 0


@dataclass(frozen=True)
class ContainerConfig:
    metadata: ContainerMetadata | None
    image: ImageSpec | None
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    working_dir: str = ""
    envs: list[KeyValue] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    log_path: str = ""
    linux: LinuxContainerConfig | None = None
    CDI_devices: list[CDIDevice] = field(default_factory=list)


@dataclass(frozen=True)
class CreateContainerRequest:
    pod_sandbox_id: str
    config: ContainerConfig | None
    sandbox_config: PodSandboxConfig | None


@dataclass(frozen=True)
class CreateContainerResponse:
    container_id: str


@dataclass(frozen=True)
class StartContainerRequest:
    container_id: str


@dataclass(frozen=True)
class StartContainerResponse:
    pass


@dataclass(frozen=True)
class StopContainerRequest:
    container_id: str
    timeout: int = 0


@dataclass(frozen=True)
class StopContainerResponse:
    pass


@dataclass(frozen=True)
class RemoveContainerRequest:
    container_id: str


@dataclass(frozen=True)
class RemoveContainerResponse:
    pass


@dataclass(frozen=True)
class ContainerFilter:
    id: str = ""
    pod_sandbox_id: str = ""


@dataclass(frozen=True)
class ListContainersRequest:
    filter: ContainerFilter | None = None


@dataclass(frozen=True)
class Container:
    id: str
    pod_sandbox_id: str
    metadata: ContainerMetadata | None
    state: int


@dataclass(frozen=True)
class ListContainersResponse:
    containers: list[Container]


@dataclass(frozen=True)
class ContainerStatusRequest:
    container_id: str
    verbose: bool = False


@dataclass(frozen=True)
class ContainerStatus:
    id: str
    metadata: ContainerMetadata | None
    state: int
    created_at: int
    started_at: int
    finished_at: int
    exit_code: int
    reason: str
    message: str
    log_path: str


@dataclass(frozen=True)
class ContainerStatusResponse:
    status: ContainerStatus | None


@dataclass(frozen=True)
class ExecSyncRequest:
    container_id: str
    cmd: list[str]
    timeout: int = 0


@dataclass(frozen=True)
class ExecSyncResponse:
    stdout: bytes
    stderr: bytes
    exit_code: int


@dataclass(frozen=True)
class Image:
    id: str
    repo_tags: list[str]


@dataclass(frozen=True)
class ImageStatusRequest:
    image: ImageSpec | None


@dataclass(frozen=True)
class ImageStatusResponse:
    image: Image | None


class CriClient:
    """containerd's RuntimeService and ImageService on its socket, one blocking call at a time."""

    def __init__(self, socket: str, timeout: float = 60.0) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def call(self, service: str, request: Any, response: type[T], *, timeout: float | None = None) -> T:
        method = type(request).__name__.removesuffix("Request")
        stub = self.channel.unary_unary(
            SCHEMA.method_path(service, method),
            request_serializer=CODEC.serializer(),
            response_deserializer=CODEC.deserializer(response),
        )
        answer: T = stub(request, timeout=timeout or self.timeout)
        return answer

    def runtime(self, request: Any, response: type[T], *, timeout: float | None = None) -> T:
        return self.call("RuntimeService", request, response, timeout=timeout)

    def image(self, request: Any, response: type[T]) -> T:
        return self.call("ImageService", request, response)
