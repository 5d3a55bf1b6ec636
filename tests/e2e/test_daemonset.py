"""deploy/kubernetes/cdictk-daemonset.yaml run as the kubelet runs it, on GPU nodes whose root has no
usable Python: Ubuntu 22.04 minbase and busybox alone (tests/e2e/noderoot.py), containerd 2.x and
runc running inside each.

The kubelet stand-in (tests/e2e/kubelet) reads the manifest itself and runs the DaemonSet's pod
through the node's CRI with the image `make image` builds: the init container to completion, then the
containers, with their env from the ConfigMaps, hostPath volumes, privileges and probes. The device
plugin in the pod registers with the stand-in's kubelet.sock in the node's
/var/lib/kubelet/device-plugins. Then a pod asking for ``nvidia.com/gpu: 1`` is admitted (Allocate),
created with the answer, and gets exactly its GPU and the driver's libraries in its ld cache:
containerd injects the spec the watcher wrote, runc runs its hook on the node. An update of the
DaemonSet's image (version N to N+1) while GPU pods start loses none of them.

The only settings the test makes are an operator's, in the ``cdictk`` ConfigMap
(:data:`OPERATOR_SETTINGS`, :data:`CONTAINERD`), and the operator's restart of containerd where the init
container only configured it; where the test spends its time is printed at the end of the run. Slow
(``make test-slow``): it runs `make image`'s image, which CI builds once (``CDICTK_IMAGE_DIR``), and
builds N+1 itself, beside the first node's work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from nodeimage import makeimage
from tests import REPO
from tests.e2e.conftest import fetch_minbase, require_root
from tests.e2e.daemons import sid_containerd_dir
from tests.e2e.kubelet import cri
from tests.e2e.kubelet.images import pause_archive
from tests.e2e.kubelet.kubelet import Kubelet
from tests.e2e.kubelet.manifest import DaemonSet, Manifest, read_manifest
from tests.e2e.kubelet.pods import NodeAccess, PodRunner, RunningPod
from tests.e2e.kubelet.scheduling import NodeInfo, Taint
from tests.e2e.noderoot import ROOTS, Node, compile_init, restart_containerd, start_node
from tests.fakenode.node import FakeNode

MANIFEST = REPO / "deploy" / "kubernetes" / "cdictk-daemonset.yaml"
GPU = "nvidia.com/gpu"
# A GPU node as Node Feature Discovery labels it, tainted as GPU nodes often are.
NODE = NodeInfo(
    "fakenode",
    labels={
        "kubernetes.io/hostname": "fakenode",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    },
    taints=(Taint(GPU, "present", "NoSchedule"),),
)
# What an operator sets in the cdictk ConfigMap for these nodes. Their procfs and sysfs, where the fake
# driver's files are bound over the node's own, are the node's (/host/proc, /host/sys), not the
# containers' own. They have no systemd that could restart containerd: on the Ubuntu node the init
# container writes containerd's config and the operator restarts it (configure); the busybox node's
# containerd config is the node OS's own, as on Bottlerocket or Talos (skip: containerd 2.x has CDI on).
OPERATOR_SETTINGS = {"cdictk": {"PROC_ROOT": "/host/proc", "SYS_ROOT": "/host/sys"}}
CONTAINERD = {"jammy": "configure", "busybox": "skip"}
# Where the init container installs the node runtime, which the spec's hooks run (docs/node-runtime.md).
RUNTIME_PREFIX = "/opt/cdictk"
READY_TIMEOUT = 120.0
RESTART_PAUSE = 0.25  # between two restarts of the resident's container: the node's CPUs are the update's too
REGISTER_TIMEOUT = 120.0
GPU_POD = """
apiVersion: v1
kind: Pod
metadata: {name: NAME, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
    - name: cuda
      image: IMAGE
      command: ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
      resources:
        limits: {nvidia.com/gpu: 1}
"""
# slow: make image's image (CDICTK_IMAGE_DIR in CI) and a build of N+1
pytestmark = [pytest.mark.slow, pytest.mark.root]
TIMINGS: dict[str, dict[str, float]] = {}  # per node: where the time went (printed by conftest)
NOTES: list[str] = []  # what else the summary says


@dataclass
class Cluster:
    node: Node
    client: cri.CriClient
    devices: Kubelet
    runner: PodRunner
    daemon_set: DaemonSet
    daemon_pod: RunningPod
    image: str
    timings: dict[str, float] = field(default_factory=dict)

    def timed(self, what: str, started: float) -> None:
        self.timings[what] = self.timings.get(what, 0.0) + time.monotonic() - started

    @property
    def gpu(self) -> FakeNode:
        return self.node.gpu


def operator_manifest(text: str, kind: str) -> Manifest:
    """The manifest as applied to the node of root ``kind``, with an operator's settings in its ConfigMaps."""
    manifest = read_manifest(text, MANIFEST.name)
    config_maps = dict(manifest.config_maps)
    chosen = {name: dict(settings) for name, settings in OPERATOR_SETTINGS.items()}
    chosen["cdictk"]["CONTAINERD"] = CONTAINERD[kind]
    for name, settings in chosen.items():
        namespace = manifest.daemon_set().meta.namespace
        found = config_maps[(namespace, name)]
        unknown = set(settings) - set(found.data)
        assert not unknown, f"the ConfigMap {name} has no {sorted(unknown)}, which an operator sets here"
        config_maps[(namespace, name)] = dataclasses.replace(found, data={**found.data, **settings})
    return dataclasses.replace(manifest, config_maps=config_maps)


def with_image(daemon_set: DaemonSet, image: str) -> DaemonSet:
    """``kubectl set image``: every container of the DaemonSet on ``image``."""
    pod = daemon_set.pod
    return dataclasses.replace(
        daemon_set,
        pod=dataclasses.replace(
            pod,
            init_containers=tuple(dataclasses.replace(c, image=image) for c in pod.init_containers),
            containers=tuple(dataclasses.replace(c, image=image) for c in pod.containers),
        ),
    )


def next_version(version: str) -> str:
    major, minor, patch = version.split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


def build_next_image(node_image: makeimage.Built, work: Path) -> makeimage.Built:
    """Version N+1 of the image: this clone's files with the next patch version in cdictk/__init__.py, built
    as `make image` builds it, from the same root at the same source epoch (so its Debian layer is N's,
    which the node has already), with N's wheels."""
    repo, out = work / "repo", work / "out"
    repo.mkdir()
    for name in makeimage.WHEEL_SOURCES:
        source = REPO / name
        if source.is_dir() and not source.is_symlink():
            ignored = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
            shutil.copytree(source, repo / name, symlinks=True, ignore=ignored)
        else:
            shutil.copy2(source, repo / name, follow_symlinks=False)
    following = next_version(makeimage.project(REPO)["version"])
    module = repo / "cdictk" / "__init__.py"
    text, count = re.subn(r'(?m)^__version__ = "[^"]*"$', f'__version__ = "{following}"', module.read_text())
    assert count == 1, "cdictk/__init__.py has no version line of its own"
    module.write_text(text)
    assert makeimage.project(repo)["version"] == following
    # A copy without git has the newest time among its files as its source epoch: N's, here.
    epoch = makeimage.source_epoch(REPO)
    for directory, subdirectories, files in os.walk(repo):
        for name in (*subdirectories, *files):
            os.utime(os.path.join(directory, name), (epoch, epoch), follow_symlinks=False)
    wheels = node_image.layout.parent / "wheels"
    if wheels.is_dir():
        shutil.copytree(wheels, out / "wheels", copy_function=os.link)
    rootfs = fetch_minbase("bookworm-python")["bookworm-python"]
    assert isinstance(rootfs, Path), rootfs
    reference = f"{node_image.reference.rpartition(':')[0]}:{following}"
    return makeimage.build(rootfs, out, reference, repo=repo)


@dataclass
class Building:
    """N+1, built in a thread from the session's start: its minute overlaps the first node's work."""

    thread: threading.Thread | None = None
    built: makeimage.Built | None = None
    error: BaseException | None = None

    def wait(self) -> makeimage.Built:
        assert self.thread is not None
        started = time.monotonic()
        self.thread.join()
        TIMINGS.setdefault("images", {})["waiting for N+1's build"] = time.monotonic() - started
        if self.error is not None:
            raise self.error
        assert self.built is not None
        return self.built


@pytest.fixture(scope="session")
def next_image(node_image: makeimage.Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Building]:
    building = Building()
    work = tmp_path_factory.mktemp("next-image")

    def build() -> None:
        started = time.monotonic()
        try:
            building.built = build_next_image(node_image, work)
        except BaseException as error:  # raised again by wait(), in the test that needs it
            building.error = error
        TIMINGS.setdefault("images", {})["make image of N+1 (beside the first node)"] = (
            time.monotonic() - started
        )

    building.thread = threading.Thread(target=build, name="make image N+1", daemon=True)
    building.thread.start()
    yield building
    building.thread.join()


@pytest.fixture(scope="session")
def node_init(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_root()
    return compile_init(tmp_path_factory.mktemp("node-init") / "node-init")


@pytest.fixture(scope="session")
def pause_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_root()
    return pause_archive(tmp_path_factory.mktemp("pause"))


def registered(devices: Kubelet, after: int) -> bool:
    return len(devices.registrations) > after and bool(devices.devices(GPU))


@pytest.fixture(scope="session")
def containerd_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """containerd's /var/lib/containerd, which the nodes take in turn: the images imported on the first
    are there on the next, as on a node image with its images pulled."""
    return tmp_path_factory.mktemp("containerd-store")


@pytest.fixture(scope="module", params=ROOTS)
def cluster(
    request: pytest.FixtureRequest,
    *,
    stub_cache: str,
    node_init: Path,
    pause_image: Path,
    node_image: makeimage.Built,
    next_image: Building,
    containerd_store: Path,
) -> Iterator[Cluster]:
    require_root()
    sid_containerd_dir()
    kind = str(request.param)
    jammy = fetch_minbase("jammy")["jammy"] if kind == "jammy" else None
    assert jammy is None or isinstance(jammy, Path), jammy
    manifest = operator_manifest(MANIFEST.read_text(), kind)
    daemon_set = manifest.daemon_set()
    image = daemon_set.pod.containers[0].image
    assert image == node_image.reference, (
        f"the manifest runs {image}, make image built {node_image.reference}"
    )
    with start_node(kind, stub_cache, node_init, jammy, containerd_store) as node:
        timings = TIMINGS.setdefault(kind, node.timings)
        NOTES.extend(f"{kind}: {note}" for note in node.notes)
        node.import_image(pause_image)
        node.import_image(node_image.archive)
        client = cri.CriClient(str(node.socket))
        devices = Kubelet(str(node.root / "var/lib/kubelet/device-plugins"))
        devices.start()
        access = NodeAccess(NODE, node.root, node.resolve, node.cgroup, client)
        runner = PodRunner(access, manifest, devices)
        try:
            started = time.monotonic()
            pod = runner.start_daemon_set_pod(daemon_set)
            timings["the DaemonSet's pod started (init container done)"] = time.monotonic() - started
            if CONTAINERD[kind] == "configure":  # the operator's part: containerd loads its new config
                restart_containerd(node)
            devices.wait_for("the device plugin's registration", lambda k: registered(k, 0), REGISTER_TIMEOUT)
            timings["... and its device plugin registered"] = time.monotonic() - started
            cluster = Cluster(node, client, devices, runner, daemon_set, pod, image, timings)
            yield cluster
        finally:
            runner.stop_all()
            devices.stop()
            client.close()


def gpu_pod(cluster: Cluster, name: str) -> Manifest:
    text = GPU_POD.replace("NAME", name).replace("IMAGE", cluster.image)
    return read_manifest(text, "the GPU pod")


@contextlib.contextmanager
def running_gpu_pod(cluster: Cluster, name: str, wait_for_devices: float = 0.0) -> Iterator[RunningPod]:
    manifest = gpu_pod(cluster, name)
    ((_, spec),) = manifest.pods.items()
    pod = cluster.runner.start(name, "default", spec.spec, wait_for_devices=wait_for_devices)
    try:
        yield pod
    finally:
        cluster.runner.stop(pod)


def sh(cluster: Cluster, pod: RunningPod, command: str) -> str:
    answer = cluster.runner.exec(pod, pod.spec.containers[0].name, ["/bin/sh", "-c", command])
    assert answer.exit_code == 0, (
        f"{command!r} exited {answer.exit_code}: {answer.stderr.decode(errors='replace')}"
    )
    return answer.stdout.decode(errors="replace")


def check_gpu(cluster: Cluster, pod: RunningPod) -> None:
    """Exactly the GPU the pod was given, the control nodes, and the driver's libraries in its ld cache."""
    (uuid,) = pod.devices[GPU]
    gpu = next(g for g in cluster.gpu.preset.gpus if g.uuid == uuid)
    listing = sh(cluster, pod, "ls /dev").split()
    gpus = sorted(name for name in listing if re.fullmatch(r"nvidia[0-9]+", name))
    assert gpus == [f"nvidia{gpu.minor}"], f"{pod.name} was given {uuid} (nvidia{gpu.minor}), sees {gpus}"
    assert "nvidiactl" in listing, listing
    cache = sh(cluster, pod, "ldconfig -p")
    for library in ("libcuda.so.1", "libnvidia-ml.so.1"):
        assert re.search(rf"\s{re.escape(library)} .*=> /usr/lib/x86_64-linux-gnu/{library}\n", cache), (
            f"{library} is not in {pod.name}'s ld cache:\n{cache}"
        )


# ---- the DaemonSet's pod --------------------------------------------------------------------------


def test_a_gpu_pod_gets_exactly_its_gpu(cluster: Cluster) -> None:
    """Two GPU pods at once, each with its own GPU and the driver in its ld cache, which the spec's hook
    wrote running through the node runtime that the init container installed (the node has no Python)."""
    spec = yaml.safe_load(cluster.node.resolve("/var/run/cdi/nvidia.yaml").read_text())
    edits = [spec.get("containerEdits", {}), *(d.get("containerEdits", {}) for d in spec["devices"])]
    hooks = {hook["path"] for edit in edits for hook in edit.get("hooks", [])}
    assert hooks, "the watcher's spec has no hook"
    for hook in hooks:
        launcher = cluster.node.resolve(hook)
        assert hook.startswith(f"{RUNTIME_PREFIX}/") and launcher.is_file(), f"{hook}: not the node runtime's"
        assert launcher.read_bytes()[:4] == b"\x7fELF", (
            f"{hook}: the runtime's launcher is a program, not a script"
        )
    started = time.monotonic()
    with running_gpu_pod(cluster, "cuda-a") as first, running_gpu_pod(cluster, "cuda-b") as second:
        cluster.timed("two GPU pods started", started)
        assert set(first.devices[GPU]).isdisjoint(second.devices[GPU])
        check_gpu(cluster, first)
        check_gpu(cluster, second)


def test_the_daemon_set_pod_runs_on_a_node_without_python(cluster: Cluster) -> None:
    """The init container exited 0 and said what it did; every container runs and none restarted;
    the pod becomes ready; the spec is on the node; the device plugin offers both GPUs."""
    pod = cluster.daemon_pod
    for container in cluster.daemon_set.pod.init_containers:
        log = cluster.runner.logs(pod, container.name)
        assert f"init container {container.name} exited 0" in pod.events, (pod.events, log)
        assert log.strip(), f"init container {container.name} said nothing of what it did"
        assert not [line for line in log.splitlines() if "error" in line.lower()], log
        NOTES.extend(f"{cluster.node.name}: {container.name}: {line}" for line in log.splitlines())
    started = time.monotonic()
    cluster.runner.wait_ready(pod, READY_TIMEOUT)
    cluster.timed("the DaemonSet's pod ready (probes)", started)
    assert pod.restarts() == dict.fromkeys(pod.containers, 0), pod.events
    spec = cluster.node.resolve("/var/run/cdi/nvidia.yaml")
    assert spec.is_file(), "the watcher wrote no spec on the node"
    assert sorted(d.ID for d in cluster.devices.devices(GPU)) == sorted(
        g.uuid for g in cluster.gpu.preset.gpus
    )


# ---- an update ----------------------------------------------------------------------------------


def test_an_image_update_loses_no_gpu_pod(cluster: Cluster, next_image: Building) -> None:
    """The DaemonSet's image set to N+1 while GPU pods start, one after another, and the container of a
    GPU pod admitted before is restarted again and again (as the kubelet restarts a container: its
    Allocate answer kept, no plugin asked, so it starts while the new init container swaps the node
    runtime too). The old pod goes, the new one installs its runtime and registers its plugin; every
    GPU container, the pods that waited for the new plugin included, starts with its GPU; the node
    runs N+1's runtime afterwards, N's kept for the hooks that may still run from it."""
    runtime = cluster.node.resolve(RUNTIME_PREFIX) / "current"
    before = os.readlink(runtime)
    following = next_image.wait()
    cluster.node.import_image(following.archive)
    results: list[str] = []  # one per GPU pod: "ok", or why it was lost
    restarts: list[tuple[float, float, str]] = []  # one per restart of the resident's container
    stop = threading.Event()

    def gpu_pods() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            try:
                with running_gpu_pod(cluster, f"cuda-{number}", wait_for_devices=REGISTER_TIMEOUT) as pod:
                    check_gpu(cluster, pod)
                results.append("ok")
            except Exception as error:  # every failure is a lost pod, which the assertion below names
                results.append(f"cuda-{number}: {error}")

    def restart(resident: RunningPod) -> None:
        while not stop.is_set():
            started = time.time()
            try:
                cluster.runner.restart_container(resident, "cuda")
                check_gpu(cluster, resident)
                restarts.append((started, time.time(), "ok"))
            except Exception as error:  # as above: a container that did not start with its GPU
                restarts.append((started, time.time(), f"restart {len(restarts)}: {error}"))
            stop.wait(RESTART_PAUSE)

    def wait_for(what: str, done: object, timeout: float = REGISTER_TIMEOUT) -> None:
        assert callable(done)
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {results} {restarts}"
            time.sleep(0.1)

    with running_gpu_pod(cluster, "resident") as resident:
        loops = [
            threading.Thread(target=gpu_pods, name="GPU pods", daemon=True),
            threading.Thread(target=restart, args=(resident,), name="restarts", daemon=True),
        ]
        for loop in loops:
            loop.start()
        try:
            wait_for("a first GPU pod and restart", lambda: results and restarts)
            started = time.monotonic()
            registrations = len(cluster.devices.registrations)
            new = cluster.runner.roll(
                cluster.daemon_pod, with_image(cluster.daemon_set, following.reference), READY_TIMEOUT
            )
            cluster.daemon_pod = new
            cluster.devices.wait_for("N+1's plugin", lambda k: registered(k, registrations), REGISTER_TIMEOUT)
            cluster.timed("the update, to N+1's plugin registered", started)
            during = len(results)
            wait_for("two GPU pods after the update", lambda: len(results) >= during + 2)
            cluster.runner.wait_ready(new, READY_TIMEOUT)
        finally:
            stop.set()
            for loop in loops:
                loop.join()
    inits = [cluster.runner.status(i) for i in new.finished_init]
    window = (min(i.started_at for i in inits) / 1e9, max(i.finished_at for i in inits) / 1e9)
    overlapping = [r for r in restarts if r[0] < window[1] and r[1] > window[0]]
    NOTES.append(
        f"{cluster.node.name}: {len(results)} GPU pods started during the update ({during} of them before "
        f"N+1's plugin registered); the resident's container restarted {len(restarts)} times, "
        f"{len(overlapping)} of them while its init container ran"
    )
    assert [r for r in results if r != "ok"] == [], results
    assert [r for *_, r in restarts if r != "ok"] == [], restarts
    assert overlapping, f"no restart while the init container ran ({window}): {restarts}"
    after = os.readlink(runtime)
    assert after != before, f"the node still runs the runtime {before}"
    assert cluster.node.resolve(f"{RUNTIME_PREFIX}/{before}").is_dir(), "the version before is gone at once"
    assert new.restarts() == dict.fromkeys(new.containers, 0), new.events
