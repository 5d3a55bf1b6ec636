"""The kubelet's pod side, for one node: a pod spec read from a manifest (a DaemonSet's template, or a
Pod) run through containerd's CRI as the kubelet runs it.

:meth:`PodRunner.start` places the pod (node selector, node affinity, taints: scheduling.py), admits it
(the device manager's Allocate for every extended resource a container asks for), makes its volumes
on the node (hostPath with its type checked or created, ConfigMaps written as the kubelet's atomic
writer lays them out, emptyDir on the node's disk or a tmpfs), runs its sandbox (host namespaces,
cgroup parent by QoS class), its init containers one after another to completion, each of whose exit
status and log is checked, then its containers with their environment (envFrom, env, ``$(VAR)``),
mounts (read-only, propagation), security context, resources and devices. A thread per pod then does
what the kubelet's workers do: it runs the exec probes (readiness, liveness, startup) through ExecSync
at their delays and periods and restarts a container that exits or fails its liveness probe, with the
kubelet's back-off. :meth:`PodRunner.stop` kills the pod as the kubelet does on deletion: its
containers stopped with the grace period, the sandbox stopped and removed, the volumes torn down,
the devices freed.

Where the kubelet would retry forever (an init container that fails, a container that cannot be
created), the stand-in raises :class:`PodError` with the container's log, so that a test fails with
the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cdictk.deviceplugin.kubelet import HEALTHY
from cdictk.deviceplugin.proto.deviceplugin_pb2 import ContainerAllocateResponse
from tests.e2e.kubelet import cri_pb2 as cri
from tests.e2e.kubelet.containerenv import command_line, container_env
from tests.e2e.kubelet.cri import CriClient
from tests.e2e.kubelet.kubelet import Kubelet, allocated
from tests.e2e.kubelet.manifest import (
    ConfigMapSource,
    Container,
    DaemonSet,
    EmptyDirSource,
    HostPathSource,
    KeyToPath,
    Manifest,
    PodSpec,
    Probe,
    Volume,
)
from tests.e2e.kubelet.scheduling import NodeInfo, refusal

KUBELET_ROOT = "/var/lib/kubelet"
POD_LOGS = "/var/log/pods"
# What the kubelet has the runtime mask and make read-only in an unprivileged container's procfs and
# sysfs (Kubernetes' DefaultProcMount).
MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
)  # fmt: skip
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
PROPAGATION = {
    "None": cri.PROPAGATION_PRIVATE,
    "HostToContainer": cri.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": cri.PROPAGATION_BIDIRECTIONAL,
}
NODE_CRITICAL = ("system-node-critical", "system-cluster-critical")
CRASH_BACKOFF = (10, 20, 40, 80, 160, 300)  # seconds before each restart of a container that exited
INIT_TIMEOUT = 300  # seconds an init container may run before the stand-in gives up on the pod
MIN_GRACE = 2  # the kubelet's floor for a container's stop (minimumGracePeriodInSeconds)
POLL = 0.1  # how often the stand-in looks again at what it waits for
TICK = 0.5  # how often a pod's worker looks at its containers


class PodError(RuntimeError):
    """A pod that could not run, as ``kubectl describe`` would say it, with the container's log."""


@dataclass(frozen=True)
class NodeAccess:
    """The node as the kubelet on it reaches it."""

    info: NodeInfo
    root: Path  # the node's files from here: the kubelet's own directories are in it
    resolve: Callable[[str], Path]  # a node path, its links followed on the node, its mounts seen
    cgroup: str  # the node's cgroup for the kubelet's pods ("" for the machine's root)
    client: CriClient


@dataclass
class ProbeState:
    probe: Probe
    due: float  # monotonic time of the next run
    successes: int = 0
    failures: int = 0
    runs: int = 0


@dataclass
class ContainerRun:
    """One container of a pod, across its restarts."""

    spec: Container
    config: cri.ContainerConfig
    id: str = ""
    attempt: int = 0
    restarts: int = 0
    started: float = 0.0
    ready: bool = False
    started_up: bool = True  # the startup probe has passed (or there is none)
    probes: dict[str, ProbeState] = field(default_factory=dict)
    restart_at: float | None = None  # when a container that exited starts again
    exits: list[str] = field(default_factory=list)  # "exit 1 at attempt 0", one per end


@dataclass
class RunningPod:
    """A pod the stand-in runs."""

    name: str
    namespace: str
    uid: str
    spec: PodSpec
    labels: dict[str, str]
    annotations: dict[str, str]
    sandbox_id: str = ""
    sandbox: cri.PodSandboxConfig | None = None
    containers: dict[str, ContainerRun] = field(default_factory=dict)
    finished_init: list[str] = field(default_factory=list)  # ids of the init containers that ran
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device IDs
    events: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    worker: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)  # the containers' states
    operating: threading.Lock = field(default_factory=threading.Lock)  # one restart or probe at a time

    @property
    def log_dir(self) -> str:
        return f"{POD_LOGS}/{self.namespace}_{self.name}_{self.uid}"

    @property
    def directory(self) -> str:
        return f"{KUBELET_ROOT}/pods/{self.uid}"

    def ready(self) -> bool:
        with self.lock:
            return all(run.ready for run in self.containers.values())

    def restarts(self) -> dict[str, int]:
        with self.lock:
            return {name: run.restarts for name, run in self.containers.items()}


def qos_class(spec: PodSpec) -> str:
    """Guaranteed, Burstable or BestEffort, from the cpu and memory of every container."""
    containers = (*spec.init_containers, *spec.containers)
    asked = [
        (c.resources.requests.get(r, c.resources.limits.get(r)), c.resources.limits.get(r))
        for c in containers
        for r in ("cpu", "memory")
    ]
    if all(request is None and limit is None for request, limit in asked):
        return "BestEffort"
    if all(limit is not None and request == limit for request, limit in asked):
        return "Guaranteed"
    return "Burstable"


def oom_score_adj(spec: PodSpec, container: Container, qos: str) -> int:
    """The kubelet's OOM score: -997 for node-critical and Guaranteed pods, 1000 for BestEffort,
    between for Burstable by the share of the node's memory the container asks for."""
    if spec.priority_class in NODE_CRITICAL or qos == "Guaranteed":
        return -997
    if qos == "BestEffort":
        return 1000
    capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    memory = container.resources.requests.get("memory", container.resources.limits.get("memory", 0))
    return int(min(max(1000 - 1000 * memory // capacity, 3), 999))


def linux_resources(spec: PodSpec, container: Container, qos: str) -> cri.LinuxContainerResources:
    resources = container.resources
    cpu_request = resources.requests.get("cpu", resources.limits.get("cpu", 0.0))
    cpu_limit = resources.limits.get("cpu")
    period = 100_000
    return cri.LinuxContainerResources(
        cpu_period=period if cpu_limit else 0,
        cpu_quota=int(cpu_limit * period) if cpu_limit else 0,
        cpu_shares=max(2, int(cpu_request * 1024)),
        memory_limit_in_bytes=int(resources.limits.get("memory", 0)),
        oom_score_adj=oom_score_adj(spec, container, qos),
    )


def extended_resources(container: Container) -> dict[str, int]:
    """What a container asks of device plugins: the limits outside cpu, memory and Kubernetes' own."""
    found = {}
    for name, count in container.resources.limits.items():
        if "/" in name and not name.split("/")[0].endswith("kubernetes.io"):
            if count != int(count) or container.resources.requests.get(name, count) != count:
                raise PodError(
                    f"container {container.name}: {name} must be a whole number, requests = limits"
                )
            found[name] = int(count)
    return found


def write_config_map(
    top: Path, data: dict[str, str], items: tuple[KeyToPath, ...], default_mode: int
) -> None:
    """A ConfigMap's keys (``items``, or every key) as files under ``top``, laid out as the kubelet's
    atomic writer does: a timestamped directory, ``..data`` linking to it, and one link per top-level
    name through ``..data``."""
    chosen = items or tuple(KeyToPath(key, key) for key in sorted(data))
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.") + uuid.uuid4().hex[:9]
    (top / stamp).mkdir(parents=True, mode=0o755)
    for item in chosen:
        target = top / stamp / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[item.key])
        target.chmod(item.mode if item.mode is not None else default_mode)
    (top / "..data").symlink_to(stamp)
    for first in sorted({item.path.split("/")[0] for item in chosen}):
        (top / first).symlink_to(f"..data/{first}")


def read_log(path: Path) -> str:
    """What a container wrote, from its CRI log file (``TIME STREAM P|F TEXT`` lines)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    out = []
    for line in lines:
        parts = line.split(" ", 3)
        if len(parts) == 4:
            out.append(parts[3] + ("\n" if parts[2] == "F" else ""))
    return "".join(out)


class PodRunner:
    """The pods of one node, run through its containerd; ``devices`` is the kubelet's device manager
    (tests/e2e/kubelet/kubelet.py), which admits what pods ask of device plugins."""

    def __init__(self, node: NodeAccess, manifest: Manifest, devices: Kubelet | None = None) -> None:
        self.node = node
        self.manifest = manifest
        self.devices = devices
        self.pods: dict[str, RunningPod] = {}
        self._lock = threading.Lock()

    @property
    def client(self) -> CriClient:
        return self.node.client

    def host_path(self, node_path: str) -> Path:
        """One of the kubelet's own paths on the node, where this process writes it."""
        return self.node.root / node_path.lstrip("/")

    # ---- start ------------------------------------------------------------------------------

    def start_daemon_set_pod(self, daemon_set: DaemonSet) -> RunningPod:
        """The DaemonSet controller's pod for this node, from the template, named as it names them."""
        template = daemon_set.template_meta
        name = f"{daemon_set.meta.name}-{uuid.uuid4().hex[:5]}"
        return self.start(
            name,
            daemon_set.meta.namespace,
            daemon_set.pod,
            template.labels,
            template.annotations,
            daemon_set=True,
        )

    def start(
        self,
        name: str,
        namespace: str,
        spec: PodSpec,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        *,
        daemon_set: bool = False,
        wait_for_devices: float = 0.0,
    ) -> RunningPod:
        """Run the pod to its containers' start (init containers done). ``wait_for_devices`` seconds a
        pod that asks for more devices than are free waits for them, as a pending pod waits for the
        scheduler; PodError when it cannot run."""
        why = refusal(spec, self.node.info, daemon_set=daemon_set)
        if why is not None:
            raise PodError(f"pod {namespace}/{name} does not land on this node: {why}")
        pod = RunningPod(
            name, namespace, str(uuid.uuid4()), spec, dict(labels or {}), dict(annotations or {})
        )
        with self._lock:
            self.pods[pod.uid] = pod
        try:
            answers = self._admit(pod, wait_for_devices)
            self._volumes(pod)
            self._run_sandbox(pod)
            for container in spec.init_containers:
                self._run_to_completion(pod, container, answers.get(container.name, []))
            for container in spec.containers:
                run = ContainerRun(container, self._config(pod, container, answers.get(container.name, [])))
                pod.containers[container.name] = run
                self._start_container(pod, run)
        except BaseException:
            with contextlib.suppress(grpc.RpcError, PodError, OSError):  # the first failure is the one to see
                self.stop(pod)
            raise
        pod.worker = threading.Thread(target=self._work, args=(pod,), name=f"pod {name}", daemon=True)
        pod.worker.start()
        return pod

    def _admit(self, pod: RunningPod, wait: float) -> dict[str, list[ContainerAllocateResponse]]:
        """The device manager's part of admission: each container's extended resources allocated
        from the healthy devices no other pod holds."""
        answers: dict[str, list[ContainerAllocateResponse]] = {}
        for container in (*pod.spec.init_containers, *pod.spec.containers):
            for resource, count in extended_resources(container).items():
                if self.devices is None:
                    raise PodError(
                        f"pod {pod.name}: {resource} asked, and this kubelet has no device manager"
                    )
                deadline = time.monotonic() + wait
                while True:
                    with self._lock:
                        taken = [d for p in self.pods.values() for ids in p.devices.values() for d in ids]
                        free = [
                            d.ID
                            for d in self.devices.devices(resource)
                            if d.health == HEALTHY and d.ID not in taken
                        ]
                        if len(free) >= count:
                            ids, answer = self.devices.allocate(resource, count, taken)
                            pod.devices.setdefault(resource, []).extend(ids)
                            break
                    if time.monotonic() > deadline:
                        raise PodError(
                            f"pod {pod.name}: {count} {resource} asked, {len(free)} free on the node "
                            f"(registered: {sorted(self.devices.endpoints)})"
                        )
                    time.sleep(POLL)
                endpoint = self.devices.endpoints[resource]
                if endpoint.options.pre_start_required:
                    raise PodError(
                        f"{resource}: the plugin wants PreStartContainer, which the stand-in does not call"
                    )
                answers.setdefault(container.name, []).append(answer)
        return answers

    # ---- volumes ----------------------------------------------------------------------------

    def _volume_dir(self, pod: RunningPod, plugin: str, volume: str) -> str:
        return f"{pod.directory}/volumes/kubernetes.io~{plugin}/{volume}"

    def _volumes(self, pod: RunningPod) -> None:
        """Each volume ready on the node, as the kubelet's volume manager makes it before the sandbox."""
        for volume in pod.spec.volumes:
            source = volume.source
            if isinstance(source, HostPathSource):
                self._check_host_path(pod, volume.name, source)
            elif isinstance(source, ConfigMapSource):
                self._write_config_map(pod, volume.name, source)
            else:
                self._empty_dir(pod, volume.name, source)

    def _check_host_path(self, pod: RunningPod, name: str, source: HostPathSource) -> None:
        """The kubelet's check of a hostPath's type on the node, and what the *OrCreate types make."""
        path = self.node.resolve(source.path)
        kind = source.type
        if kind == "DirectoryOrCreate" and not path.exists():
            path.mkdir(mode=0o755, parents=True)
        elif kind == "FileOrCreate" and not path.exists():
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.touch(0o644)
        checks = {
            "DirectoryOrCreate": path.is_dir,
            "Directory": path.is_dir,
            "FileOrCreate": path.is_file,
            "File": path.is_file,
            "Socket": path.is_socket,
            "CharDevice": path.is_char_device,
            "BlockDevice": path.is_block_device,
        }
        if kind and not checks[kind]():
            raise PodError(
                f"pod {pod.name}: volume {name}: hostPath type check failed: {source.path} is not a {kind}"
            )

    def _write_config_map(self, pod: RunningPod, name: str, source: ConfigMapSource) -> None:
        found = self.manifest.config_map(pod.namespace, source.name)
        if found is None and not source.optional:
            raise PodError(f"pod {pod.name}: volume {name}: ConfigMap {source.name} not found")
        data = found.data if found is not None else {}
        missing = [item.key for item in source.items if item.key not in data]
        if missing:
            raise PodError(f"pod {pod.name}: volume {name}: ConfigMap {source.name} has no key {missing[0]}")
        top = self.host_path(self._volume_dir(pod, "configmap", name))
        write_config_map(top, data, source.items, source.default_mode)

    def _empty_dir(self, pod: RunningPod, name: str, source: EmptyDirSource) -> None:
        directory = self.host_path(self._volume_dir(pod, "empty-dir", name))
        directory.mkdir(parents=True)
        if source.medium == "Memory":
            # Made here and seen on the node: /var/lib/kubelet propagates from the kubelet's side.
            size = f",size={source.size_limit}" if source.size_limit else ""
            mount = ["mount", "-t", "tmpfs", "-o", f"mode=0777{size}", "tmpfs", str(directory)]
            done = subprocess.run(mount, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise PodError(f"pod {pod.name}: volume {name}: mount tmpfs: {done.stderr.strip()}")
        directory.chmod(0o777)

    def _teardown_volumes(self, pod: RunningPod) -> None:
        directory = self.host_path(pod.directory)
        for volume in pod.spec.volumes:
            if isinstance(volume.source, EmptyDirSource) and volume.source.medium == "Memory":
                point = self.host_path(self._volume_dir(pod, "empty-dir", volume.name))
                if os.path.ismount(point):
                    subprocess.run(["umount", str(point)], capture_output=True, check=False)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(self.host_path(pod.log_dir), ignore_errors=True)

    def _mounts(self, pod: RunningPod, container: Container) -> list[cri.Mount]:
        volumes = {v.name: v for v in pod.spec.volumes}
        mounts = []
        for mount in container.mounts:
            volume: Volume = volumes[mount.name]
            source = volume.source
            readonly = mount.read_only
            if isinstance(source, HostPathSource):
                host_path = source.path
            elif isinstance(source, ConfigMapSource):
                host_path = self._volume_dir(pod, "configmap", volume.name)
                readonly = True  # the kubelet mounts API data read-only whatever the pod says
            else:
                host_path = self._volume_dir(pod, "empty-dir", volume.name)
            if mount.sub_path:
                if mount.sub_path.startswith("/") or ".." in mount.sub_path.split("/"):
                    raise PodError(
                        f"container {container.name}: subPath {mount.sub_path!r} leaves its volume"
                    )
                host_path = f"{host_path.rstrip('/')}/{mount.sub_path}"
            mounts.append(
                cri.Mount(
                    container_path=mount.mount_path,
                    host_path=host_path,
                    readonly=readonly,
                    propagation=PROPAGATION[mount.propagation],
                )
            )
        # The termination message file, which the kubelet gives every container.
        if container.termination_message_path:
            message = f"{pod.directory}/containers/{container.name}/{uuid.uuid4().hex[:8]}"
            host = self.host_path(message)
            host.parent.mkdir(parents=True, exist_ok=True)
            host.touch(0o666)
            host.chmod(0o666)
            mounts.append(cri.Mount(container_path=container.termination_message_path, host_path=message))
        return mounts

    # ---- sandbox and containers -------------------------------------------------------------

    def _namespaces(self, spec: PodSpec) -> cri.NamespaceOption:
        return cri.NamespaceOption(
            network=cri.NODE if spec.host_network else cri.POD,
            pid=cri.NODE if spec.host_pid else cri.CONTAINER,
            ipc=cri.NODE if spec.host_ipc else cri.POD,
        )

    def _run_sandbox(self, pod: RunningPod) -> None:
        qos = qos_class(pod.spec)
        group = {"Guaranteed": "", "Burstable": "/burstable", "BestEffort": "/besteffort"}[qos]
        labels = {
            **pod.labels,
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.pod.uid": pod.uid,
        }
        pod.sandbox = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace),
            hostname="" if pod.spec.host_network else pod.name,
            log_directory=pod.log_dir,
            labels=labels,
            annotations=pod.annotations,
            linux=cri.LinuxPodSandboxConfig(
                cgroup_parent=f"{self.node.cgroup}/kubepods{group}/pod{pod.uid}",
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=self._namespaces(pod.spec),
                    privileged=pod.spec.privileged,
                ),
            ),
        )
        self.host_path(pod.log_dir).mkdir(parents=True, exist_ok=True)
        pod.sandbox_id = self.client.runtime.RunPodSandbox(
            cri.RunPodSandboxRequest(config=pod.sandbox), timeout=120
        ).pod_sandbox_id

    def _config(
        self, pod: RunningPod, container: Container, answers: list[ContainerAllocateResponse]
    ) -> cri.ContainerConfig:
        """The CreateContainer config the kubelet writes: the pod's env before the plugins', their
        mounts and devices after the volumes', CDI devices by name."""
        image = self.client.images.ImageStatus(
            cri.ImageStatusRequest(image=cri.ImageSpec(image=container.image)), timeout=self.client.timeout
        )
        if not image.HasField("image"):
            raise PodError(
                f"pod {pod.name}: container {container.name}: image {container.image} is not on the node "
                f"(imagePullPolicy {container.pull_policy}; the stand-in pulls nothing)"
            )
        skipped: list[str] = []
        fields = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "metadata.uid": pod.uid,
            "spec.nodeName": self.node.info.name,
            "spec.serviceAccountName": pod.spec.service_account,
        }
        env = container_env(
            container, lambda name: self.manifest.config_map(pod.namespace, name), fields, skipped
        )
        if skipped:
            pod.events.append(f"container {container.name}: not valid variable names, left out: {skipped}")
        command, args = command_line(container, env)
        edits = allocated(
            answers,
            [cri.KeyValue(key=k, value=v.encode()) for k, v in env.items()],
            self._mounts(pod, container),
        )
        annotations = {**edits.annotations, "io.kubernetes.container.name": container.name}
        qos = qos_class(pod.spec)
        security = container.security
        return cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=container.name),
            image=cri.ImageSpec(image=container.image, user_specified_image=container.image),
            command=command,
            args=args,
            working_dir=container.working_dir,
            envs=edits.envs,
            mounts=edits.mounts,
            devices=edits.devices,
            labels={
                "io.kubernetes.container.name": container.name,
                "io.kubernetes.pod.name": pod.name,
                "io.kubernetes.pod.namespace": pod.namespace,
                "io.kubernetes.pod.uid": pod.uid,
            },
            annotations=annotations,
            linux=cri.LinuxContainerConfig(
                resources=linux_resources(pod.spec, container, qos),
                security_context=cri.LinuxContainerSecurityContext(
                    capabilities=cri.Capability(
                        add_capabilities=list(security.add_capabilities),
                        drop_capabilities=list(security.drop_capabilities),
                    )
                    if security.add_capabilities or security.drop_capabilities
                    else None,
                    privileged=security.privileged,
                    namespace_options=self._namespaces(pod.spec),
                    readonly_rootfs=security.read_only_root_filesystem,
                    masked_paths=[] if security.privileged else list(MASKED_PATHS),
                    readonly_paths=[] if security.privileged else list(READONLY_PATHS),
                    no_new_privs=security.allow_privilege_escalation is False,
                ),
            ),
            CDI_devices=edits.cdi_devices,
        )

    def _create_and_start(self, pod: RunningPod, config: cri.ContainerConfig) -> str:
        assert pod.sandbox is not None
        name = config.metadata.name or "?"
        try:
            container_id = self.client.runtime.CreateContainer(
                cri.CreateContainerRequest(
                    pod_sandbox_id=pod.sandbox_id, config=config, sandbox_config=pod.sandbox
                ),
                timeout=120,
            ).container_id
        except grpc.RpcError as error:
            raise PodError(
                f"pod {pod.name}: container {name}: CreateContainerError: {error.details()}"
            ) from None
        try:
            self.client.runtime.StartContainer(
                cri.StartContainerRequest(container_id=container_id), timeout=120
            )
        except grpc.RpcError as error:
            log = read_log(self.host_path(f"{pod.log_dir}/{config.log_path}"))
            raise PodError(
                f"pod {pod.name}: container {name}: RunContainerError: {error.details()}\n{log}"
            ) from None
        return container_id

    def _run_to_completion(
        self, pod: RunningPod, container: Container, answers: list[ContainerAllocateResponse]
    ) -> None:
        """An init container, run until it exits; PodError with its log unless it exits 0."""
        config = self._config(pod, container, answers)
        config.log_path = f"{container.name}/0.log"
        container_id = self._create_and_start(pod, config)
        pod.finished_init.append(container_id)
        deadline = time.monotonic() + INIT_TIMEOUT
        while (status := self.status(container_id)).state != cri.CONTAINER_EXITED:
            if time.monotonic() > deadline:
                raise PodError(
                    f"pod {pod.name}: init container {container.name} still runs after {INIT_TIMEOUT} s; its "
                    f"log:\n{self.logs(pod, container.name)}"
                )
            time.sleep(POLL)
        log = self.logs(pod, container.name)
        pod.events.append(f"init container {container.name} exited {status.exit_code}")
        if status.exit_code != 0:
            raise PodError(
                f"pod {pod.name}: init container {container.name} exited {status.exit_code} "
                f"({status.reason}); its log:\n{log}"
            )

    def _start_container(self, pod: RunningPod, run: ContainerRun) -> None:
        config = cri.ContainerConfig()
        config.CopyFrom(run.config)
        config.metadata.attempt = run.attempt
        config.log_path = f"{run.spec.name}/{run.attempt}.log"
        config.annotations["io.kubernetes.container.restartCount"] = str(run.restarts)
        run.id = self._create_and_start(pod, config)
        now = time.monotonic()
        run.started = now
        run.restart_at = None
        run.started_up = run.spec.startup is None
        run.ready = run.spec.readiness is None and run.started_up
        run.probes = {
            kind: ProbeState(probe, now + probe.initial_delay)
            for kind, probe in (
                ("startup", run.spec.startup),
                ("readiness", run.spec.readiness),
                ("liveness", run.spec.liveness),
            )
            if probe is not None
        }

    def restart_container(self, pod: RunningPod, name: str) -> None:
        """What the kubelet does to restart a container (after it exited, or failed its liveness probe):
        stopped with the grace period, removed, and created again from the same config, the same
        devices' Allocate answer included, and started: no plugin is asked."""
        run = pod.containers[name]
        with pod.operating:
            grace = max(pod.spec.termination_grace, MIN_GRACE)
            self._stop_container(run.id, grace)
            self.client.runtime.RemoveContainer(
                cri.RemoveContainerRequest(container_id=run.id), timeout=self.client.timeout
            )
            with pod.lock:
                run.ready = False
            run.attempt += 1
            run.restarts += 1
            self._start_container(pod, run)

    def status(self, container_id: str) -> cri.ContainerStatus:
        answer = self.client.runtime.ContainerStatus(
            cri.ContainerStatusRequest(container_id=container_id), timeout=self.client.timeout
        )
        assert answer.HasField("status")
        return answer.status

    # ---- the pod's worker -------------------------------------------------------------------

    def _work(self, pod: RunningPod) -> None:
        """Probes and restarts, until the pod stops."""
        while not pod.stopping.wait(TICK):
            for run in list(pod.containers.values()):
                if pod.stopping.is_set():
                    return
                try:
                    with pod.operating:
                        self._look_after(pod, run)
                except (grpc.RpcError, PodError) as error:
                    if not pod.stopping.is_set():
                        pod.events.append(f"container {run.spec.name}: {error}")

    def _look_after(self, pod: RunningPod, run: ContainerRun) -> None:
        now = time.monotonic()
        if run.restart_at is not None:
            if now >= run.restart_at:
                self.client.runtime.RemoveContainer(
                    cri.RemoveContainerRequest(container_id=run.id), timeout=self.client.timeout
                )
                run.attempt += 1
                run.restarts += 1
                self._start_container(pod, run)
            return
        status = self.status(run.id)
        if status.state == cri.CONTAINER_EXITED:
            self._ended(pod, run, f"exit {status.exit_code} ({status.reason})")
            return
        for kind, state in run.probes.items():
            if now < state.due or (kind != "startup" and not run.started_up):
                continue
            state.due = now + state.probe.period
            passed = self._probe(run, state.probe)
            state.runs += 1
            if passed:
                state.successes, state.failures = state.successes + 1, 0
            else:
                state.successes, state.failures = 0, state.failures + 1
            with pod.lock:
                if kind == "readiness":
                    if state.successes >= state.probe.success_threshold:
                        run.ready = True
                    elif state.failures >= state.probe.failure_threshold:
                        run.ready = False
                elif kind == "startup" and passed:
                    run.started_up = True
                    run.ready = run.spec.readiness is None
            if not passed and kind != "readiness" and state.failures >= state.probe.failure_threshold:
                pod.events.append(
                    f"container {run.spec.name}: {kind} probe failed {state.failures} times: restarting"
                )
                self.client.runtime.StopContainer(
                    cri.StopContainerRequest(
                        container_id=run.id, timeout=max(pod.spec.termination_grace, MIN_GRACE)
                    ),
                    timeout=pod.spec.termination_grace + 60,
                )
                self._ended(pod, run, f"killed by its {kind} probe")
                return

    def _ended(self, pod: RunningPod, run: ContainerRun, why: str) -> None:
        with pod.lock:
            run.ready = False
        run.exits.append(f"{why} at attempt {run.attempt}")
        pod.events.append(
            f"container {run.spec.name}: {why}; log:\n{self.logs(pod, run.spec.name, run.attempt)}"
        )
        backoff = CRASH_BACKOFF[min(run.restarts, len(CRASH_BACKOFF) - 1)]
        run.restart_at = time.monotonic() + backoff

    def _probe(self, run: ContainerRun, probe: Probe) -> bool:
        try:
            answer = self.client.runtime.ExecSync(
                cri.ExecSyncRequest(container_id=run.id, cmd=list(probe.command), timeout=probe.timeout),
                timeout=probe.timeout + 30,
            )
        except grpc.RpcError:
            return False
        return answer.exit_code == 0

    # ---- what a test reads, and the end -----------------------------------------------------

    def logs(self, pod: RunningPod, container: str, attempt: int | None = None) -> str:
        """What a container wrote (its latest attempt's, or ``attempt``'s)."""
        run = pod.containers.get(container)
        number = attempt if attempt is not None else (run.attempt if run else 0)
        return read_log(self.host_path(f"{pod.log_dir}/{container}/{number}.log"))

    def wait_ready(self, pod: RunningPod, timeout: float) -> None:
        """Until every container is ready; PodError with the pod's events otherwise."""
        deadline = time.monotonic() + timeout
        while not pod.ready():
            if time.monotonic() > deadline:
                states = {
                    name: f"ready={run.ready} restarts={run.restarts} probes="
                    + ",".join(f"{k}:{s.runs} runs/{s.failures} failing" for k, s in run.probes.items())
                    for name, run in pod.containers.items()
                }
                raise PodError(f"pod {pod.name} not ready within {timeout} s: {states}; events: {pod.events}")
            time.sleep(POLL)

    def exec(
        self, pod: RunningPod, container: str, command: list[str], timeout: int = 30
    ) -> cri.ExecSyncResponse:
        run = pod.containers[container]
        return self.client.runtime.ExecSync(
            cri.ExecSyncRequest(container_id=run.id, cmd=command, timeout=timeout), timeout=timeout + 30
        )

    def stop(self, pod: RunningPod) -> None:
        """The pod deleted: its containers stopped with the grace period, its sandbox stopped and
        removed, its volumes torn down, its devices freed."""
        pod.stopping.set()
        if pod.worker is not None:
            pod.worker.join()
        grace = max(pod.spec.termination_grace, MIN_GRACE)
        ids = [run.id for run in pod.containers.values() if run.id]
        stoppers = [
            threading.Thread(target=self._stop_container, args=(container_id, grace), daemon=True)
            for container_id in ids
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        if pod.sandbox_id:
            with contextlib.suppress(grpc.RpcError):
                self.client.runtime.StopPodSandbox(
                    cri.StopPodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=120
                )
            for container_id in (*pod.finished_init, *ids):
                with contextlib.suppress(grpc.RpcError):
                    self.client.runtime.RemoveContainer(
                        cri.RemoveContainerRequest(container_id=container_id), timeout=self.client.timeout
                    )
            self.client.runtime.RemovePodSandbox(
                cri.RemovePodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=120
            )
        self._teardown_volumes(pod)
        with self._lock:
            self.pods.pop(pod.uid, None)

    def _stop_container(self, container_id: str, grace: int) -> None:
        with contextlib.suppress(grpc.RpcError):
            self.client.runtime.StopContainer(
                cri.StopContainerRequest(container_id=container_id, timeout=grace), timeout=grace + 60
            )

    def stop_all(self) -> None:
        for pod in list(self.pods.values()):
            self.stop(pod)

    def roll(self, old: RunningPod, daemon_set: DaemonSet, ready_timeout: float) -> RunningPod:
        """The DaemonSet controller's rolling update on this one node: with no surge, the old pod goes
        before the new one starts (maxUnavailable); with a surge, the new one is ready first."""
        if daemon_set.max_surge in (0, "0%"):
            self.stop(old)
            return self.start_daemon_set_pod(daemon_set)
        new = self.start_daemon_set_pod(daemon_set)
        self.wait_ready(new, ready_timeout)
        self.stop(old)
        return new
