"""Kubernetes' paths to a GPU, end to end: our device plugin answers the kubelet stand-in, which drives
containerd 2.x's CRI plugin for a pod, as a kubelet does.

One containerd for the module (its spec dir the fake eight-GPU node's spec, and the ``cdictk`` runtime
handler written by ``cdictk runtime configure``), with a locally built pause image and the cached
Debian rootfs imported into ``k8s.io``: nothing is pulled, no CNI (host network). The tests of
containerd's own CDI run with it on (fixture ``cdi_on``); those of the RuntimeClass with it off
(``cdi_off``: containerd restarted on the same root, its images kept), so that only ``cdictk-runtime``
can have given the GPU, which a pod of the default runtime with the same answer shows. Each test runs a
pod, looks inside its running container (device nodes, the driver's libraries in the ld cache,
nvidia-smi) and checks that removing it leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdictk.deviceplugin.proto.deviceplugin_pb2 import ContainerAllocateResponse
from cdictk.node.gpuhealth import HealthPolicy
from cdictk.runtime.launchers import install_launchers
from tests.conftest import node_with_spec
from tests.e2e.conftest import build_busybox_rootfs, require_root
from tests.e2e.daemons import Containerd, containerd_daemon, sid_containerd_dir
from tests.e2e.kubelet import cri_pb2 as cri
from tests.e2e.kubelet.cri import CriClient
from tests.e2e.kubelet.images import docker_archive, pause_archive
from tests.e2e.kubelet.kubelet import LOG_PATH, Kubelet, Pod, containerd_config, run_pod
from tests.e2e.kubelet.nodeplugin import serve
from tests.fakenode.node import FakeNode

pytestmark = pytest.mark.root

DEBIAN = "localhost/cdictk-e2e-debian:1"
CUDA_STYLE = "localhost/cdictk-e2e-cuda-style:1"  # busybox with NVIDIA_VISIBLE_DEVICES=all, as CUDA images
GPU = "nvidia.com/gpu"
HANDLER = "cdictk"


@dataclass
class Cluster:
    node: FakeNode
    spec_dir: Path
    containerd: Containerd
    client: CriClient
    kubelet: Kubelet  # our plugin, answering with CDI names (field and annotations)
    mounts_kubelet: Kubelet  # our plugin with the volume-mounts strategy
    cgroup: str
    configs: dict[bool, str]  # containerd's config with its CDI on, and off
    cdi: bool = True

    def use_cdi(self, on: bool) -> None:
        """containerd's CDI on or off; a restart when that changes (pods must be gone)."""
        if self.cdi == on:
            return
        self.client.close()
        self.containerd.restart(self.configs[on])
        self.client = CriClient(str(self.containerd.socket))
        runtime = self.containerd.dump_config()["plugins"]["io.containerd.cri.v1.runtime"]
        assert runtime["enable_cdi"] is on
        assert HANDLER in runtime["containerd"]["runtimes"]
        self.cdi = on


def _start_plugin(
    node: FakeNode, spec_dir: Path, plugin_dir: str, stop: threading.Event, **changes: Any
) -> Kubelet:
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    serve(kubelet, node, spec_dir, stop, mig_strategy="mixed", health=HealthPolicy(enabled=False), **changes)
    kubelet.wait_for("the plugin", lambda k: bool(k.devices(GPU)))
    return kubelet


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, stub_cache: str, debian_rootfs_cache: Path
) -> Iterator[Cluster]:
    require_root()
    binary_dir = sid_containerd_dir()
    node, spec_dir = node_with_spec(tmp_path_factory, stub_cache, "k8s", "eight")
    work = tmp_path_factory.mktemp("k8s")
    pause = pause_archive(work)
    debian = work / "debian.tar"
    docker_archive(debian_rootfs_cache, debian, DEBIAN, cmd=["sleep", "infinity"])
    busybox = work / "busybox-rootfs"
    build_busybox_rootfs(busybox)
    cuda_style = work / "cuda-style.tar"
    docker_archive(
        busybox, cuda_style, CUDA_STYLE, env=["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"]
    )
    # The RuntimeClass's handler: cdictk-runtime through its launcher, with settings of its own.
    install_launchers(str(work / "launchers"))
    launcher = str(work / "launchers" / "cdictk-runtime")
    shim_config = work / "cdictk-config.toml"
    shim_config.write_text(
        f'[runtime]\nruntimes = ["/usr/sbin/runc"]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n'
        "[requests]\naccept-volume-mounts = true\n"
    )
    runc_root = work / "runc"
    base = work / "etc" / "config.toml"
    base.parent.mkdir()
    base.write_text(containerd_config(runc_root))
    drop_in = work / "etc" / "conf.d" / "99-cdictk.toml"
    configured = subprocess.run(
        [
            sys.executable, "-m", "cdictk", "runtime", "configure", "--runtime", "containerd",
            "--config", str(base), "--drop-in-config", str(drop_in), "--runtime-path", launcher,
            "--runtime-name", HANDLER, "--enable-cdi", "--cdi-spec-dir", str(spec_dir),
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert configured.returncode == 0, configured.stderr
    # CDI off: the same drop-in with enable_cdi false, imported instead (the handler is kept).
    drop_in_off = drop_in.with_name("99-cdictk-cdi-off.toml")
    on_text = drop_in.read_text()
    assert on_text.count("enable_cdi = true") == 1, on_text
    drop_in_off.write_text(on_text.replace("enable_cdi = true", "enable_cdi = false"))
    configs = {True: base.read_text(), False: base.read_text().replace(str(drop_in), str(drop_in_off))}
    assert configs[False] != configs[True]
    # The runtime handler inherits containerd's environment: the shim's settings and cache.
    saved = {name: os.environ.get(name) for name in ("CDICTK_CONFIG",)}
    os.environ["CDICTK_CONFIG"] = str(shim_config)
    stop = threading.Event()
    plugin_dirs = [tempfile.mkdtemp(prefix="cdictk-k8s-", dir="/tmp") for _ in range(2)]
    try:
        with containerd_daemon(binary_dir, configs[True]) as containerd:
            for archive in (pause, debian, cuda_style):
                imported = containerd.ctr("images", "import", str(archive), namespace="k8s.io", timeout=300)
                assert imported.returncode == 0, imported.stderr
            client = CriClient(str(containerd.socket))
            kubelet = _start_plugin(node, spec_dir, plugin_dirs[0], stop)
            mounts = _start_plugin(node, spec_dir, plugin_dirs[1], stop, list_strategies=("volume-mounts",))
            cgroup = f"/cdictk-e2e-{uuid.uuid4().hex[:8]}"
            cluster = Cluster(node, spec_dir, containerd, client, kubelet, mounts, cgroup, configs)
            try:
                yield cluster
            finally:
                stop.set()
                kubelet.stop()
                mounts.stop()
                cluster.client.close()
                _remove_cgroup(cgroup)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for directory in plugin_dirs:
            subprocess.run(["rm", "-rf", directory], check=False)


def _remove_cgroup(name: str) -> None:
    for controller in Path("/sys/fs/cgroup").iterdir():
        group = controller / name.lstrip("/")
        if group.is_dir():
            for sub in sorted(group.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()


def cgroups_named(base: Path, name: str) -> list[str]:
    """The cgroups called ``name`` anywhere below ``base``. The machine's other containers come and go
    meanwhile: a directory that vanishes under the walk is passed over (os.walk), not an error."""
    return [top for top, _, _ in os.walk(base) if os.path.basename(top) == name]


def nothing_left(cluster: Cluster, pod: Pod) -> None:
    """After the pod's removal: containerd lists nothing, and no mount, process or cgroup names it."""
    client = cluster.client
    assert client.runtime.ListContainers(cri.ListContainersRequest(), timeout=client.timeout).containers == []
    assert client.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=client.timeout).items == []
    mountinfo = Path("/proc/self/mountinfo").read_text()
    for ident in (pod.sandbox_id, pod.container_id):
        assert ident not in mountinfo, f"a mount of {ident[:12]} is left"
        assert not cgroups_named(Path("/sys/fs/cgroup/memory"), ident), f"a cgroup of {ident[:12]} is left"
    tasks = cluster.containerd.ctr("tasks", "list", "--quiet", namespace="k8s.io").stdout.split()
    assert tasks == []


def gpu_inside(pod: Pod, device: str) -> None:
    """What a GPU container has: the GPU's node (allowed: ENXIO, not EPERM), the control nodes, the
    driver's libraries in the ld cache, nvidia-smi."""
    listing = pod.sh("ls /dev")
    assert device in listing.split() and "nvidiactl" in listing.split(), listing
    opened = pod.exec(f"cat /dev/{device}")
    assert "No such device or address" in opened.stderr.decode(), opened
    assert "libcuda.so.1" in pod.sh("ldconfig -p"), "libcuda.so.1 is not in the container's ld cache"
    assert pod.sh("nvidia-smi").strip() == "fake"


@pytest.fixture
def cdi_on(cluster: Cluster) -> Cluster:
    cluster.use_cdi(True)
    return cluster


@pytest.fixture
def cdi_off(cluster: Cluster) -> Cluster:
    cluster.use_cdi(False)
    return cluster


def nvidia_gpus(pod: Pod) -> list[str]:
    return [name for name in pod.sh("ls /dev").split() if name.startswith("nvidia") and name[6:].isdigit()]


# ---- containerd's CDI on: it applies the names itself ---------------------------------------------


def test_cdi_devices_field_with_containerd_2(cdi_on: Cluster) -> None:
    """The kubelet's CDI field (Kubernetes 1.29+): the plugin's cdi_devices in the CRI's CDI_devices
    only, as kubelets pass them since they stopped also writing annotations for them."""
    cluster = cdi_on
    devices, answer = cluster.kubelet.allocate(GPU, 1)
    only_field = type(answer)(cdi_devices=answer.cdi_devices)
    with run_pod(cluster.client, DEBIAN, [only_field], cgroup_parent=cluster.cgroup) as pod:
        gpu = cluster.node.preset.gpus[[g.uuid for g in cluster.node.preset.gpus].index(devices[0])]
        gpu_inside(pod, f"nvidia{gpu.minor}")
        others = [f"nvidia{g.minor}" for g in cluster.node.preset.gpus if g.uuid != devices[0]]
        assert not set(others) & set(pod.sh("ls /dev").split())
    nothing_left(cluster, pod)


def test_cdi_annotations_with_containerd_2(cdi_on: Cluster) -> None:
    """Older kubelets and device plugins: cdi.k8s.io/ annotations only, which containerd reads too."""
    cluster = cdi_on
    _, answer = cluster.kubelet.allocate(GPU, 2)
    only_annotations = type(answer)(annotations=answer.annotations)
    with run_pod(cluster.client, DEBIAN, [only_annotations], cgroup_parent=cluster.cgroup) as pod:
        found = nvidia_gpus(pod)
        assert len(found) == 2, found
        gpu_inside(pod, found[0])
    nothing_left(cluster, pod)


def test_mig_device(cdi_on: Cluster) -> None:
    """--mig-strategy mixed: nvidia.com/mig-1g.10gb gives the MIG device's parent node and its caps."""
    cluster = cdi_on
    # Each resource registers on its own: the fixture waited for nvidia.com/gpu alone.
    cluster.kubelet.wait_for("the MIG resource", lambda k: bool(k.devices("nvidia.com/mig-1g.10gb")))
    devices, answer = cluster.kubelet.allocate("nvidia.com/mig-1g.10gb", 1)
    assert devices[0].startswith("MIG-")
    with run_pod(cluster.client, DEBIAN, [answer], cgroup_parent=cluster.cgroup) as pod:
        gpu_inside(pod, "nvidia0")
        caps = pod.sh("ls /dev/nvidia-caps").split()
        assert len(caps) == 2, caps  # the GPU instance's and the compute instance's access nodes
    nothing_left(cluster, pod)


def test_a_pod_that_asks_for_nothing_gets_no_gpu(cdi_on: Cluster) -> None:
    """A CUDA-style image sets NVIDIA_VISIBLE_DEVICES=all; a pod that asked for no GPU gets none."""
    no_gpu_for_the_cuda_style_image(cdi_on, "")


# ---- containerd's CDI off: only cdictk-runtime, the RuntimeClass's handler, can give a GPU ----------


def test_runtime_class_with_annotations(cdi_off: Cluster) -> None:
    """A RuntimeClass whose handler is cdictk-runtime, given the plugin's annotations, which containerd
    passes on (the handler's container_annotations, as configure writes them) but does not apply."""
    cluster = cdi_off
    _, answer = cluster.kubelet.allocate(GPU, 1)
    only_annotations = type(answer)(annotations=answer.annotations)
    with run_pod(
        cluster.client, DEBIAN, [only_annotations], runtime_handler=HANDLER, cgroup_parent=cluster.cgroup
    ) as pod:
        status = cluster.client.runtime.PodSandboxStatus(
            cri.PodSandboxStatusRequest(pod_sandbox_id=pod.sandbox_id), timeout=cluster.client.timeout
        )
        assert status.status.runtime_handler == HANDLER
        found = nvidia_gpus(pod)
        assert len(found) == 1, found
        gpu_inside(pod, found[0])
    nothing_left(cluster, pod)
    # The control: the same answer through the default runtime gives nothing, so the shim gave it.
    with run_pod(cluster.client, DEBIAN, [only_annotations], cgroup_parent=cluster.cgroup) as pod:
        assert not [name for name in pod.sh("ls /dev").split() if name.startswith("nvidia")]
    nothing_left(cluster, pod)


def test_runtime_class_with_volume_mounts(cdi_off: Cluster) -> None:
    """The volume-mount strategy: only cdictk-runtime (accept-volume-mounts) turns the kubelet's mounts
    into a GPU; containerd knows nothing of them."""
    cluster = cdi_off
    devices, answer = cluster.mounts_kubelet.allocate(GPU, 1)
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    with run_pod(
        cluster.client, DEBIAN, [answer], runtime_handler=HANDLER, cgroup_parent=cluster.cgroup
    ) as pod:
        gpu = next(g for g in cluster.node.preset.gpus if g.uuid == devices[0])
        gpu_inside(pod, f"nvidia{gpu.minor}")
    nothing_left(cluster, pod)


def test_a_pod_that_asks_for_nothing_gets_no_gpu_from_the_runtime_class(cdi_off: Cluster) -> None:
    """The same CUDA-style image through the cdictk RuntimeClass: its NVIDIA_VISIBLE_DEVICES=all is
    not a request."""
    no_gpu_for_the_cuda_style_image(cdi_off, HANDLER)


def no_gpu_for_the_cuda_style_image(cluster: Cluster, handler: str) -> None:
    with run_pod(cluster.client, CUDA_STYLE, runtime_handler=handler, cgroup_parent=cluster.cgroup) as pod:
        assert pod.sh("echo $NVIDIA_VISIBLE_DEVICES").strip() == "all"
        listing = pod.sh("ls /dev").split()
        assert not [name for name in listing if name.startswith("nvidia")], listing
    nothing_left(cluster, pod)


# ---- what the shim says reaches the kubelet, and only the kubelet ---------------------------------


def test_a_refusal_reaches_the_kubelet(cdi_off: Cluster, tmp_path: Path) -> None:
    """A pod that asks through the RuntimeClass for a GPU the node lacks fails to start with the shim's
    own line: containerd reads it from the runtime log it names (``--log``), as it reads runc's, and the
    kubelet shows it (``kubectl describe``), not "unable to retrieve OCI runtime error"."""
    cluster = cdi_off
    asked = {"cdi.k8s.io/cdictk-e2e": f"{GPU}=9"}  # the node has GPUs 0 to 7
    line = shim_line(tmp_path, {"annotations": asked})
    assert line.startswith(f"cdictk-runtime: error: {GPU}=9: unresolvable CDI device"), line
    with (
        pytest.raises(grpc.RpcError) as failed,
        run_pod(
            cluster.client, DEBIAN, [ContainerAllocateResponse(annotations=asked)],
            runtime_handler=HANDLER, cgroup_parent=cluster.cgroup,
        ),
    ):  # fmt: skip
        pytest.fail("the container started")
    details = failed.value.details() or ""
    assert f"OCI runtime create failed: {line}" in details, details
    client = cluster.client
    assert client.runtime.ListContainers(cri.ListContainersRequest(), timeout=client.timeout).containers == []
    assert client.runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=client.timeout).items == []


def shim_line(tmp_path: Path, config: dict[str, Any]) -> str:
    """What the shim says on stderr, with the handler's settings, to a create of ``config``."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(config))
    result = subprocess.run(
        [sys.executable, "-m", "cdictk.entrypoints.shim", "create", "--bundle", str(bundle), "probe"],
        capture_output=True, text=True, check=False, env={**os.environ, "CDICTK_CACHE_DIR": ""},
    )  # fmt: skip
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result
    return result.stderr.strip()


def test_a_warning_stays_out_of_the_containers_log(cdi_off: Cluster, tmp_path: Path) -> None:
    """The CUDA-style image's NVIDIA_VISIBLE_DEVICES=all, ignored with a warning: the warning is in the
    runtime log, and the container's log (the runtime's stderr in create is the container's) holds only
    what the workload wrote."""
    cluster = cdi_off
    logs = tmp_path / "pod-logs"
    logs.mkdir()
    with run_pod(
        cluster.client, CUDA_STYLE, runtime_handler=HANDLER, cgroup_parent=cluster.cgroup,
        log_directory=str(logs), command=["sh", "-c", "echo workload-started; exec sleep 3600"],
    ) as pod:  # fmt: skip
        container_log = logs / LOG_PATH
        deadline = time.monotonic() + 20
        while "workload-started" not in container_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = container_log.read_text().splitlines()
        assert len(lines) == 1 and lines[0].endswith(" stdout F workload-started"), lines
        runtime_log = (
            cluster.containerd.root / "state" / "io.containerd.runtime.v2.task" / "k8s.io"
            / pod.container_id / "log.json"
        )  # fmt: skip
        records = [json.loads(line) for line in runtime_log.read_text().splitlines()]
        warnings = [r["msg"] for r in records if r["level"] == "warning"]
        assert len(warnings) == 1, records
        assert warnings[0].startswith('cdictk-runtime: warning: NVIDIA_VISIBLE_DEVICES="all" ignored: ')
    nothing_left(cluster, pod)
