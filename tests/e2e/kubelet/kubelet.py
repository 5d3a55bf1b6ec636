"""A kubelet stand-in: the device manager's side of the device plugin API, and the CRI calls for a pod.

- :class:`Kubelet` serves ``v1beta1.Registration`` on ``kubelet.sock`` in a device plugin directory of
  the test's own. On ``Register`` it checks the version, dials the plugin's socket, asks its options and
  starts ``ListAndWatch`` in a thread, as the kubelet does, keeping each resource's latest device list;
  or, with ``refusal`` set, answers every registration with that error.
  :meth:`Kubelet.allocate` does what admission does: pick healthy devices (asking
  ``GetPreferredAllocation`` when the plugin offers it and there are more candidates than needed),
  then ``Allocate`` with one container request. :meth:`Kubelet.restart` is a kubelet restart: every
  socket in the directory deleted and ``kubelet.sock`` made anew.
- :func:`run_pod` drives containerd's CRI as the kubelet does for a pod with one container: a
  host-network sandbox, the container config merged from the Allocate answers (``CDI_devices``,
  annotations, env, mounts, device specs), ``runtime_handler`` for a RuntimeClass, start, and on exit
  stop and remove both.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from cdictk.deviceplugin.kubelet import HEALTHY, KUBELET_SOCKET, UNHEALTHY, VERSION
from cdictk.deviceplugin.proto.deviceplugin_pb2 import (
    AllocateRequest,
    ContainerAllocateRequest,
    ContainerAllocateResponse,
    ContainerPreferredAllocationRequest,
    Device,
    DevicePluginOptions,
    Empty,
    PreferredAllocationRequest,
    RegisterRequest,
)
from cdictk.deviceplugin.proto.deviceplugin_pb2_grpc import (
    DevicePluginStub,
    RegistrationServicer,
    add_RegistrationServicer_to_server,
)
from tests.e2e.kubelet import cri_pb2 as cri
from tests.e2e.kubelet.cri import CriClient
from tests.e2e.kubelet.images import PAUSE_IMAGE


@dataclass
class Endpoint:
    """A registered plugin as the kubelet's device manager keeps it."""

    resource: str
    socket: str
    options: DevicePluginOptions
    channel: grpc.Channel
    stub: DevicePluginStub
    devices: list[Device] = field(default_factory=list)
    updates: int = 0
    stream_ended: bool = False


class Kubelet(RegistrationServicer):
    def __init__(self, plugin_dir: str) -> None:
        self.plugin_dir = plugin_dir
        self.endpoints: dict[str, Endpoint] = {}
        self.registrations: list[RegisterRequest] = []
        self.refusal: tuple[grpc.StatusCode, str] | None = None  # what to answer every Register with
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None

    @property
    def socket(self) -> str:
        return os.path.join(self.plugin_dir, KUBELET_SOCKET)

    def start(self) -> None:
        os.makedirs(self.plugin_dir, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        add_RegistrationServicer_to_server(self, server)
        # Bound under another name and renamed once listening: a plugin that saw kubelet.sock between
        # the bind and the listen would be refused a connection, which no kubelet restart test asks for.
        staging = self.socket + ".new"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        server.add_insecure_port(f"unix://{staging}")
        server.start()
        os.rename(staging, self.socket)
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        for endpoint in self.endpoints.values():
            endpoint.channel.close()
        self.endpoints.clear()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)

    def restart(self) -> None:
        """What a kubelet start does to the directory: every socket deleted, kubelet.sock made anew."""
        self.stop()
        for name in os.listdir(self.plugin_dir):
            path = os.path.join(self.plugin_dir, name)
            if _is_socket(path):
                os.unlink(path)
        self.start()

    def Register(  # the generated servicer's method: the context of either server kind
        self, request: RegisterRequest, context: grpc.ServicerContext | grpc.aio.ServicerContext[Any, Any]
    ) -> Empty:
        assert isinstance(context, grpc.ServicerContext)  # ours is the threaded server
        if self.refusal is not None:
            context.abort(*self.refusal)
        if request.version != VERSION:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version!r}")
        if "/" not in request.resource_name or request.resource_name.split("/")[0].endswith("kubernetes.io"):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"invalid resource name {request.resource_name!r}"
            )
        socket = os.path.join(self.plugin_dir, request.endpoint)
        channel = grpc.insecure_channel(f"unix://{socket}")
        stub = DevicePluginStub(channel)
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
            options = stub.GetDevicePluginOptions(Empty(), timeout=30)
        except (grpc.FutureTimeoutError, grpc.RpcError) as exc:
            channel.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot dial the plugin at {socket}: {exc}")
        endpoint = Endpoint(request.resource_name, socket, options, channel, stub)
        with self._changed:
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = endpoint
            self.registrations.append(request)
            self._changed.notify_all()
        if old is not None:
            old.channel.close()
        threading.Thread(target=self._watch, args=(endpoint,), daemon=True).start()
        return Empty()

    def _watch(self, endpoint: Endpoint) -> None:
        try:
            for answer in endpoint.stub.ListAndWatch(Empty()):
                with self._changed:
                    endpoint.devices = list(answer.devices)
                    endpoint.updates += 1
                    self._changed.notify_all()
        except grpc.RpcError:
            pass
        with self._changed:
            # The kubelet marks every device of a plugin whose stream ended unhealthy.
            endpoint.devices = [
                Device(ID=d.ID, health=UNHEALTHY, topology=d.topology if d.HasField("topology") else None)
                for d in endpoint.devices
            ]
            endpoint.stream_ended = True
            self._changed.notify_all()

    def wait_for(self, what: str, predicate: object, timeout: float = 20.0) -> None:
        """Wait until ``predicate(self)`` is true; AssertionError naming ``what`` otherwise."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}: {self.endpoints}")
                self._changed.wait(min(left, 0.2))

    def devices(self, resource: str) -> list[Device]:
        with self._changed:
            endpoint = self.endpoints.get(resource)
            return list(endpoint.devices) if endpoint is not None else []

    def health(self, resource: str) -> dict[str, str]:
        return {device.ID: device.health for device in self.devices(resource)}

    def preferred(self, resource: str, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        endpoint = self.endpoints[resource]
        request = PreferredAllocationRequest(
            container_requests=[
                ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
                )
            ]
        )
        answer = endpoint.stub.GetPreferredAllocation(request, timeout=30)
        return list(answer.container_responses[0].deviceIDs)

    def allocate(
        self, resource: str, count: int, taken: Sequence[str] = ()
    ) -> tuple[list[str], ContainerAllocateResponse]:
        """Admission of one container asking for ``count`` of ``resource``: the devices and the answer."""
        endpoint = self.endpoints[resource]
        healthy = [d.ID for d in endpoint.devices if d.health == HEALTHY and d.ID not in taken]
        assert len(healthy) >= count, f"{resource}: {count} asked, {len(healthy)} healthy and free"
        chosen = healthy[:count]
        if endpoint.options.get_preferred_allocation_available and len(healthy) > count:
            picked = [d for d in self.preferred(resource, healthy, [], count) if d in healthy]
            chosen = (picked + [d for d in healthy if d not in picked])[:count]
        return chosen, self.allocate_ids(resource, chosen)

    def allocate_ids(self, resource: str, ids: Sequence[str]) -> ContainerAllocateResponse:
        endpoint = self.endpoints[resource]
        request = AllocateRequest(container_requests=[ContainerAllocateRequest(devices_ids=ids)])
        answer = endpoint.stub.Allocate(request, timeout=30)
        assert answer.container_responses, "Allocate answered no container response"
        return answer.container_responses[0]


def _is_socket(path: str) -> bool:
    import stat

    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


# ---- the CRI side -------------------------------------------------------------------------------


def containerd_config(runc_root: str | os.PathLike[str], *, enable_cdi: bool | None = None) -> str:
    """A containerd 2.x config for these pods, before ``cdictk runtime configure``: the local pause
    image as the sandbox, runc with its state under ``runc_root``; ``enable_cdi`` written when given
    (containerd 2.x's default is on)."""
    cdi = "" if enable_cdi is None else f"  enable_cdi = {'true' if enable_cdi else 'false'}\n"
    return (
        "version = 3\n"
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
        f"  sandbox = '{PAUSE_IMAGE}'\n"
        "[plugins.'io.containerd.cri.v1.runtime']\n"
        # Root here lacks CAP_SYS_RESOURCE: the pause container's oom_score_adj of -998 is refused.
        "  restrict_oom_score_adj = true\n"
        f"{cdi}"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
        "  runtime_type = 'io.containerd.runc.v2'\n"
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n"
        f"  Root = '{os.fspath(runc_root)}'\n"
    )


LOG_PATH = "main/0.log"  # the container's log in its pod's log directory, named as the kubelet names it


@dataclass(frozen=True)
class Pod:
    sandbox_id: str
    container_id: str
    client: CriClient

    def exec(self, command: str, timeout: int = 30) -> cri.ExecSyncResponse:
        return self.client.runtime.ExecSync(
            cri.ExecSyncRequest(container_id=self.container_id, cmd=["sh", "-c", command], timeout=timeout),
            timeout=timeout + 30,
        )

    def sh(self, command: str) -> str:
        """stdout of ``sh -c command`` in the container; AssertionError on a non-zero exit."""
        answer = self.exec(command)
        assert answer.exit_code == 0, (
            f"{command!r} exited {answer.exit_code}: {answer.stderr.decode(errors='replace')}"
        )
        return answer.stdout.decode(errors="replace")


@dataclass(frozen=True)
class Allocated:
    """What the device plugins' Allocate answers add to a container's CRI config, as the kubelet adds
    it: env after the pod's, mounts and devices appended (a device once per container path), plugin
    annotations under the kubelet's own, CDI devices once per name."""

    envs: list[cri.KeyValue]
    mounts: list[cri.Mount]
    devices: list[cri.Device]
    annotations: dict[str, str]
    cdi_devices: list[cri.CDIDevice]


def allocated(
    answers: Sequence[ContainerAllocateResponse], envs: list[cri.KeyValue], mounts: list[cri.Mount]
) -> Allocated:
    """The container's own ``envs`` and ``mounts`` with the answers' edits after them."""
    envs, mounts = list(envs), list(mounts)
    devices: dict[str, cri.Device] = {}
    annotations: dict[str, str] = {}
    cdi: dict[str, cri.CDIDevice] = {}
    for answer in answers:
        envs += [cri.KeyValue(key=k, value=v.encode()) for k, v in answer.envs.items()]
        mounts += [
            cri.Mount(container_path=m.container_path, host_path=m.host_path, readonly=m.read_only)
            for m in answer.mounts
        ]
        for device in answer.devices:
            devices.setdefault(
                device.container_path,
                cri.Device(
                    container_path=device.container_path,
                    host_path=device.host_path,
                    permissions=device.permissions,
                ),
            )
        for key, value in answer.annotations.items():
            annotations.setdefault(key, value)
        for cdi_device in answer.cdi_devices:
            cdi.setdefault(cdi_device.name, cri.CDIDevice(name=cdi_device.name))
    return Allocated(envs, mounts, list(devices.values()), annotations, list(cdi.values()))


def container_config(
    name: str,
    image: str,
    command: Sequence[str],
    answers: Sequence[ContainerAllocateResponse],
    env: dict[str, str] | None = None,
) -> cri.ContainerConfig:
    """The CRI config the kubelet writes for a container with these Allocate answers (:func:`allocated`)."""
    edits = allocated(answers, [cri.KeyValue(key=k, value=v.encode()) for k, v in (env or {}).items()], [])
    annotations = {**edits.annotations, "io.kubernetes.container.name": name}
    return cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=name),
        image=cri.ImageSpec(image=image, user_specified_image=image),
        command=list(command),
        envs=edits.envs,
        mounts=edits.mounts,
        devices=edits.devices,
        annotations=annotations,
        CDI_devices=edits.cdi_devices,
    )


def sandbox_config(cgroup_parent: str = "", log_directory: str = "") -> cri.PodSandboxConfig:
    """A new pod's sandbox as the kubelet asks for it: host network (no CNI), its own name and UID;
    its containers' logs in ``log_directory`` ("": none kept)."""
    name = f"pod-{uuid.uuid4().hex[:8]}"
    return cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=name, uid=str(uuid.uuid4()), namespace="default"),
        log_directory=log_directory,
        labels={"io.kubernetes.pod.name": name},
        linux=cri.LinuxPodSandboxConfig(
            cgroup_parent=cgroup_parent,
            security_context=cri.LinuxSandboxSecurityContext(
                namespace_options=cri.NamespaceOption(network=cri.NODE)
            ),
        ),
    )


@contextlib.contextmanager
def run_pod(
    client: CriClient,
    image: str,
    answers: Sequence[ContainerAllocateResponse] = (),
    *,
    runtime_handler: str = "",
    cgroup_parent: str = "",
    env: dict[str, str] | None = None,
    log_directory: str = "",
    command: Sequence[str] = ("sleep", "3600"),
) -> Iterator[Pod]:
    """A pod with one container that runs ``command`` (sleeps), started as the kubelet does; stopped
    and removed after.
    With ``log_directory``, containerd writes the container's stdout and stderr to :data:`LOG_PATH`
    there, as it does for the kubelet."""
    sandbox = sandbox_config(cgroup_parent, log_directory)
    sandbox_id = client.runtime.RunPodSandbox(
        cri.RunPodSandboxRequest(config=sandbox, runtime_handler=runtime_handler), timeout=client.timeout
    ).pod_sandbox_id
    container_id = ""
    try:
        config = container_config("main", image, command, answers, env)
        if log_directory:
            config.log_path = LOG_PATH
        container_id = client.runtime.CreateContainer(
            cri.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox),
            timeout=client.timeout,
        ).container_id
        client.runtime.StartContainer(
            cri.StartContainerRequest(container_id=container_id), timeout=client.timeout
        )
        status = client.runtime.ContainerStatus(
            cri.ContainerStatusRequest(container_id=container_id), timeout=client.timeout
        ).status
        assert status.state == cri.CONTAINER_RUNNING, status
        yield Pod(sandbox_id, container_id, client)
    finally:
        remove_pod(client, sandbox_id, container_id)


def remove_pod(client: CriClient, sandbox_id: str, container_id: str = "") -> None:
    """What the kubelet does when a pod is deleted: its container (if one was made) stopped and
    removed, then its sandbox."""
    if container_id:
        client.runtime.StopContainer(
            cri.StopContainerRequest(container_id=container_id, timeout=0), timeout=client.timeout
        )
        client.runtime.RemoveContainer(
            cri.RemoveContainerRequest(container_id=container_id), timeout=client.timeout
        )
    client.runtime.StopPodSandbox(
        cri.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=client.timeout
    )
    client.runtime.RemovePodSandbox(
        cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=client.timeout
    )
