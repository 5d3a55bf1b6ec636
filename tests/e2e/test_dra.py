"""Dynamic Resource Allocation the kubelet's way: ``cdictk dra-plugin`` for a fake eight-GPU node (GPU 0
in MIG mode), the API server stand-in it reaches through a kubeconfig, the scheduler's allocation with
CEL, the kubelet's plugin watcher and DRA manager, and containerd 2.x's CRI with the answered names in
``CDI_devices``.

One containerd and one plugin process for the module (the plugin is restarted by one test and left
running). Each test makes its claims, allocates them as the scheduler does, has the kubelet stand-in
prepare them (``NodePrepareResources``), runs a pod with their CDI names, looks inside (exactly the
allocated devices' nodes), and on the pod's removal has the claims unprepared
(``NodeUnprepareResources``): their spec files are gone.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdictk.deviceplugin.proto.deviceplugin_pb2 import CDIDevice, ContainerAllocateResponse
from cdictk.dra import cdinames
from tests.conftest import require_node_tools
from tests.e2e.conftest import require_root
from tests.e2e.daemons import Containerd, containerd_daemon, sid_containerd_dir
from tests.e2e.kubelet import cri_pb2 as cri
from tests.e2e.kubelet.allocator import AllocationError, Allocator, Pod, published_devices, write_allocation
from tests.e2e.kubelet.apiserver import ApiServer, running
from tests.e2e.kubelet.cri import CriClient
from tests.e2e.kubelet.dra import DraError, DraKubelet, container_cdi_ids
from tests.e2e.kubelet.draplugin import PluginProcess, plugin_command
from tests.e2e.kubelet.images import docker_archive, pause_archive
from tests.e2e.kubelet.kubelet import Pod as RunningPod
from tests.e2e.kubelet.kubelet import container_config, containerd_config, remove_pod, sandbox_config
from tests.e2e.test_kubernetes import DEBIAN, gpu_inside, nvidia_gpus
from tests.fakenode.node import FakeNode, build_node, mig_cap_minor

pytestmark = pytest.mark.root

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
NAMESPACE = "default"


@dataclass
class Cluster:
    node: FakeNode
    containerd: Containerd
    client: CriClient
    server: ApiServer
    kubelet: DraKubelet
    plugin: PluginProcess
    allocator: Allocator
    cdi_dir: Path
    cgroup: str

    def spec(self, uid: str) -> Path:
        return Path(cdinames.claim_specs(str(self.cdi_dir)).path(uid))

    def devices(self) -> dict[str, dict[str, Any]]:
        """The published devices: name -> attributes of the driver's domain."""
        return {d.name: dict(d.attributes[DRIVER]) for d in published_devices(self.server, NODE)}


def _claim(name: str, device_class: str, *, count: int = 1, selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, stub_cache: str, debian_rootfs_cache: Path
) -> Iterator[Cluster]:
    require_root()
    require_node_tools()
    binary_dir = sid_containerd_dir()
    node = build_node(str(tmp_path_factory.mktemp("dra-node") / "node"), "eight", stub_cache)
    # The plugin's checkpoint is of one boot: the fake procfs gets the boot ID a real one has.
    boot_id = Path(node.proc, "sys/kernel/random/boot_id")
    boot_id.parent.mkdir(parents=True, exist_ok=True)
    boot_id.write_text(f"{uuid.uuid4()}\n")
    work = tmp_path_factory.mktemp("dra")
    pause = pause_archive(work)
    debian = work / "debian.tar"
    docker_archive(debian_rootfs_cache, debian, DEBIAN, cmd=["sleep", "infinity"])
    # Sockets need short paths: the plugin's and the registry under /tmp, the claims' specs beside.
    top = Path(tempfile.mkdtemp(prefix="cdictk-dra-", dir="/tmp"))
    cdi_dir, registry, plugin_dir = top / "cdi", top / "registry", top / "plugin"
    cdi_dir.mkdir()
    section = "[plugins.'io.containerd.cri.v1.runtime']\n"
    config = containerd_config(work / "runc").replace(
        section, f"{section}  enable_cdi = true\n  cdi_spec_dirs = ['{cdi_dir}']\n", 1
    )
    cgroup = f"/cdictk-e2e-{uuid.uuid4().hex[:8]}"
    try:
        with running() as server, containerd_daemon(binary_dir, config) as containerd:
            for archive in (pause, debian):
                imported = containerd.ctr("images", "import", str(archive), namespace="k8s.io", timeout=300)
                assert imported.returncode == 0, imported.stderr
            server.add_node(NODE)
            kubeconfig = server.write_kubeconfig(top / "kubeconfig")
            kubelet = DraKubelet(str(registry), server)
            kubelet.start()
            command = plugin_command(
                node, NODE, kubeconfig=kubeconfig, registry=registry, plugin_dir=plugin_dir, cdi_dir=cdi_dir
            )
            plugin = PluginProcess(command, top / "plugin.log")
            plugin.start()
            client = CriClient(str(containerd.socket))
            try:
                plugin.wait_for("registered with the kubelet")
                plugin.wait_for("published ")
                kubelet.wait_for("the plugin", lambda k: DRIVER in k.drivers)
                yield Cluster(
                    node, containerd, client, server, kubelet, plugin, Allocator(server), cdi_dir, cgroup
                )
            finally:
                code = plugin.stop() if plugin.process is not None else 0
                kubelet.stop()
                client.close()
                _remove_cgroup(cgroup)
                assert code == 0, plugin.text()
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)


def _remove_cgroup(name: str) -> None:
    for controller in Path("/sys/fs/cgroup").iterdir():
        group = controller / name.lstrip("/")
        if group.is_dir():
            for sub in sorted(group.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()


@dataclass
class DraPod:
    containers: list[RunningPod]  # one per container, in the pod's one sandbox
    uid: str  # the pod's UID, which the claims are reserved for
    prepared: dict[str, dict[str, list[str]]]  # claim UID -> request -> CDI IDs

    @property
    def pod(self) -> RunningPod:
        return self.containers[0]

    def claim_devices(self, cluster: Cluster, claim: str) -> list[str]:
        """The devices allocated to ``claim``."""
        stored = cluster.server.claims[(NAMESPACE, claim)]
        return [r["device"] for r in stored["status"]["allocation"]["devices"]["results"]]


@contextlib.contextmanager
def dra_pod(cluster: Cluster, claims: Sequence[str], *, containers: int = 1) -> Iterator[DraPod]:
    """A pod whose ``containers`` each use all of ``claims`` (names in the namespace): allocated
    (unless done already) and reserved for it, prepared, each container made with their CDI IDs; on
    exit the pod removed and the claims no other pod holds unprepared."""
    uid = str(uuid.uuid4())
    name = f"pod-{uid[:8]}"
    for claim in claims:
        cluster.allocator.allocate(NAMESPACE, claim, NODE, [Pod(name, uid)])
    prepared = cluster.kubelet.prepare(uid, [(NAMESPACE, claim) for claim in claims])
    try:
        ids = [i for claim_uid in prepared for i in container_cdi_ids(prepared, claim_uid)]
        answer = ContainerAllocateResponse(cdi_devices=[CDIDevice(name=i) for i in ids])
        with run_containers(cluster, [answer] * containers) as running_pod:
            yield DraPod(running_pod, uid, prepared)
        for container in running_pod:
            nothing_left(cluster, container)
    finally:
        cluster.kubelet.unprepare(uid)
        for claim in claims:
            cluster.allocator.release(NAMESPACE, claim, uid)


@contextlib.contextmanager
def run_containers(
    cluster: Cluster, answers: Sequence[ContainerAllocateResponse]
) -> Iterator[list[RunningPod]]:
    """One sandbox with a sleeping container per answer, started as the kubelet starts a pod's
    containers; stopped and removed after."""
    client = cluster.client
    sandbox = sandbox_config(cluster.cgroup)
    sandbox_id = client.runtime.RunPodSandbox(
        cri.RunPodSandboxRequest(config=sandbox), timeout=client.timeout
    ).pod_sandbox_id
    started: list[RunningPod] = []
    try:
        for index, answer in enumerate(answers):
            config = container_config(f"c{index}", DEBIAN, ["sleep", "3600"], [answer])
            container_id = client.runtime.CreateContainer(
                cri.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox),
                timeout=client.timeout,
            ).container_id
            started.append(RunningPod(sandbox_id, container_id, client))
            client.runtime.StartContainer(
                cri.StartContainerRequest(container_id=container_id), timeout=client.timeout
            )
        yield started
    finally:
        for container in started[1:]:
            remove_container(client, container.container_id)
        remove_pod(client, sandbox_id, started[0].container_id if started else "")


def remove_container(client: CriClient, container_id: str) -> None:
    client.runtime.StopContainer(
        cri.StopContainerRequest(container_id=container_id, timeout=0), timeout=client.timeout
    )
    client.runtime.RemoveContainer(
        cri.RemoveContainerRequest(container_id=container_id), timeout=client.timeout
    )


def nothing_left(cluster: Cluster, pod: RunningPod) -> None:
    """containerd lists neither the pod nor its container (another pod may still run)."""
    client = cluster.client
    containers = client.runtime.ListContainers(cri.ListContainersRequest(), timeout=client.timeout)
    sandboxes = client.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=client.timeout)
    assert pod.container_id not in {c.id for c in containers.containers}
    assert pod.sandbox_id not in {s.id for s in sandboxes.items}


def _uid(cluster: Cluster, claim: str) -> str:
    return str(cluster.server.claims[(NAMESPACE, claim)]["metadata"]["uid"])


def _minor(device: str) -> int:
    return int(device.split("-")[1])  # gpu-<minor>, gpu-<parent minor>-mig-...


def test_a_whole_gpu(cluster: Cluster) -> None:
    cluster.server.put_claim(_claim("whole", "gpu.nvidia.com"))
    with dra_pod(cluster, ["whole"]) as running_pod:
        uid = _uid(cluster, "whole")
        [device] = running_pod.claim_devices(cluster, "whole")
        assert running_pod.prepared == {uid: {"gpu": [f"k8s.gpu.nvidia.com/claim={uid}-{device}"]}}
        assert cluster.spec(uid).is_file()
        assert nvidia_gpus(running_pod.pod) == [f"nvidia{_minor(device)}"]
        gpu_inside(running_pod.pod, f"nvidia{_minor(device)}")
    assert not cluster.spec(uid).exists()


def test_a_mig_device_by_cel(cluster: Cluster) -> None:
    """mig.nvidia.com narrowed to profile 1g.10gb: the container sees the parent's node and exactly
    that MIG device's two capability nodes (its GPU and compute instance's)."""
    selector = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    cluster.server.put_claim(_claim("mig", "mig.nvidia.com", selector=selector))
    with dra_pod(cluster, ["mig"]) as running_pod:
        [device] = running_pod.claim_devices(cluster, "mig")
        attributes = cluster.devices()[device]
        assert attributes["type"] == "mig" and attributes["profile"] == "1g.10gb", attributes
        mig = next(m for m in cluster.node.preset.migs if m.uuid == attributes["uuid"])
        assert nvidia_gpus(running_pod.pod) == ["nvidia0"]
        caps = set(running_pod.pod.sh("ls /dev/nvidia-caps").split())
        assert caps == {
            f"nvidia-cap{mig_cap_minor(0, mig.gi)}",
            f"nvidia-cap{mig_cap_minor(0, mig.gi, mig.ci)}",
        }
    assert not cluster.spec(_uid(cluster, "mig")).exists()


def test_two_devices_in_one_claim(cluster: Cluster) -> None:
    cluster.server.put_claim(_claim("two", "gpu.nvidia.com", count=2))
    with dra_pod(cluster, ["two"]) as running_pod:
        devices = running_pod.claim_devices(cluster, "two")
        assert len(set(devices)) == 2
        assert sorted(nvidia_gpus(running_pod.pod)) == sorted(f"nvidia{_minor(d)}" for d in devices)
        assert len(running_pod.prepared[_uid(cluster, "two")]["gpu"]) == 2
    assert not cluster.spec(_uid(cluster, "two")).exists()


def test_a_claim_shared_by_two_containers_and_two_pods(cluster: Cluster) -> None:
    """One claim in both containers of a pod, and reserved for a second pod too: prepared once, the
    same GPU in all three containers at once, unprepared only when the second pod has gone."""
    cluster.server.put_claim(_claim("shared", "gpu.nvidia.com"))
    uid = _uid(cluster, "shared")
    with dra_pod(cluster, ["shared"], containers=2) as first:
        [device] = first.claim_devices(cluster, "shared")
        with dra_pod(cluster, ["shared"]) as second:
            assert first.prepared == second.prepared
            reserved = cluster.server.claims[(NAMESPACE, "shared")]["status"]["reservedFor"]
            assert [c["uid"] for c in reserved] == [first.uid, second.uid]
            for container in (*first.containers, second.pod):
                assert nvidia_gpus(container) == [f"nvidia{_minor(device)}"]
        assert cluster.spec(uid).is_file()  # the first pod still runs
        assert nvidia_gpus(first.containers[1]) == [f"nvidia{_minor(device)}"]
    assert not cluster.spec(uid).exists()


def test_a_claim_of_another_node_or_driver_is_refused(cluster: Cluster) -> None:
    """Allocated to another node's pool: the plugin refuses it in one line and writes nothing. To
    another driver: the kubelet has no such driver registered, and says so."""
    server = cluster.server
    for name, result, expected in (
        ("elsewhere", {"driver": DRIVER, "pool": "node-b"}, "is allocated to another node's pool node-b"),
        (
            "other-driver",
            {"driver": "gpu.example.com", "pool": NODE},
            "DRA driver gpu.example.com is not registered",
        ),
    ):
        claim = server.put_claim(_claim(name, "gpu.nvidia.com"))
        uid = str(uuid.uuid4())
        write_allocation(
            server, claim, [{"request": "gpu", "device": "gpu-1", **result}], NODE, [Pod("p", uid)]
        )
        with pytest.raises(DraError) as refused:
            cluster.kubelet.prepare(uid, [(NAMESPACE, name)])
        message = str(refused.value)
        assert expected in message and "\n" not in message, message
        assert not cluster.spec(_uid(cluster, name)).exists()
        assert _uid(cluster, name) not in cluster.kubelet.claims
        server.delete_claim(NAMESPACE, name)


def test_a_plugin_restart_between_prepare_and_unprepare(cluster: Cluster) -> None:
    """Stopped with a claim prepared, the plugin leaves its spec (the pod runs on) and unregisters;
    started again it removes a spec its checkpoint does not hold, registers again, and the pod's
    removal still unprepares the claim."""
    cluster.server.put_claim(_claim("restart", "gpu.nvidia.com"))
    uid = _uid(cluster, "restart")
    stray = cluster.spec(str(uuid.uuid4()))
    registered = cluster.kubelet.registered(DRIVER)
    with dra_pod(cluster, ["restart"]) as running_pod:
        assert cluster.plugin.stop() == 0
        cluster.kubelet.wait_for("the driver to go", lambda k: DRIVER not in k.drivers)
        assert cluster.spec(uid).is_file()
        stray.write_text(cluster.spec(uid).read_text())  # a claim's spec the checkpoint lacks
        cluster.plugin.start()
        cluster.kubelet.wait_for("the driver again", lambda k: k.registered(DRIVER) > registered)
        assert not stray.exists()
        assert cluster.spec(uid).is_file()
        assert len(nvidia_gpus(running_pod.pod)) == 1
    assert not cluster.spec(uid).exists()


def test_a_deleted_claim_is_cleaned_up(cluster: Cluster) -> None:
    """The claim deleted while its pod runs: the pod's removal unprepares it from what the kubelet
    kept, and its spec goes."""
    cluster.server.put_claim(_claim("deleted", "gpu.nvidia.com"))
    uid = _uid(cluster, "deleted")
    with dra_pod(cluster, ["deleted"]):
        cluster.server.delete_claim(NAMESPACE, "deleted")
        assert cluster.spec(uid).is_file()
    assert not cluster.spec(uid).exists()


def test_the_slices_follow_the_mig_layout(cluster: Cluster) -> None:
    """Two 1g.10gb instances destroyed: the slices lose them, a claim for one finds none; made again,
    they are back."""
    original = cluster.node.preset.migs

    def migs() -> list[str]:
        return sorted(name for name in cluster.devices() if "-mig-" in name)

    before = migs()
    assert len(before) == len(original) == 3
    selector = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    try:
        cluster.node.reconfigure_mig(original[:1])
        _wait("the slices without the 1g.10gb", lambda: len(migs()) == 1)
        assert all("1g10gb" not in name for name in migs())
        cluster.server.put_claim(_claim("gone", "mig.nvidia.com", selector=selector))
        with pytest.raises(AllocationError, match="has 0 free that match"):
            cluster.allocator.allocate(NAMESPACE, "gone", NODE, [Pod("p", str(uuid.uuid4()))])
    finally:
        cluster.node.reconfigure_mig(original)
    _wait("the slices with the 1g.10gb again", lambda: migs() == before)


def _wait(what: str, condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
