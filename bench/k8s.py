"""From the kubelet's ``Allocate`` (or ``NodePrepareResources``) to a running container, through each
path a cluster uses to give a pod its GPU, against plain ``ctr run`` of the same image.

Sets up what tests/e2e/test_kubernetes.py does, twice: the fake eight-GPU node and its spec, our device
plugin (in this process, health checks off) with the kubelet stand-in, and containerd 2.x (Debian sid's,
tests/setup-host.sh fetches it) with its CRI plugin, a locally built pause image and the cached Debian
rootfs as the image (nothing pulled, host network). One containerd has its CDI on; the other has it off
and the ``cdictk`` runtime handler (``cdictk-runtime`` through the launcher ``cdictk runtime
install-launchers`` writes), as a node with containerd 1.6 or CDI off has. Then, round-robin (each
round in another order, round 0 a warm-up left out), each row once a round:

- ``ctr run --detach`` of the image running ``sleep`` on the CDI-on containerd: no pod, no GPU;
- a pod without a GPU through the CRI (RunPodSandbox with its pause container, CreateContainer,
  StartContainer), on each containerd (on the CDI-off one with runc, through the RuntimeClass, and
  through a second handler that runs pip's console script ``cdictk-runtime``, what ``runtime
  configure`` registered before it installed the front: Python on every runtime command, its
  settings named by a one-line ``sh`` wrapper): the floor of every GPU path beside it, and what the
  handler costs a pod that asks for no GPU over runc on the same containerd;
- a pod with one GPU: ``Allocate`` (our plugin's answer, over gRPC), then the same calls with the
  answer's ``CDI_devices`` alone, or its ``cdi.k8s.io/`` annotation alone (containerd's CDI applies the
  spec), or through the RuntimeClass with the annotation, or with the volume-mount strategy's env and
  mounts (``cdictk-runtime`` applies it; containerd's CDI off);
- a pod with one GPU by Dynamic Resource Allocation, set up as tests/e2e/test_dra.py does: ``cdictk
  dra-plugin`` as a process for the same node (its claims' specs beside the node's), registered with
  the kubelet stand-in's DRA side, the API server stand-in it reads claims from. A new claim for one
  ``gpu.nvidia.com`` device each round, allocated by the scheduler stand-in (CEL in cel-python: timed
  apart, not in the row's figure, as the scheduler's part of the device plugin rows is not either),
  then ``NodePrepareResources`` and the CRI calls with the answered names in ``CDI_devices`` on the
  CDI-on containerd; then, untimed, ``NodeUnprepareResources`` and the claim released and deleted.
  Compared with the device plugin's ``CDI_devices`` row as well as with its floor.

Every start runs the spec's createContainer hook. Timed with ``time.perf_counter`` around blocking
calls only: each gRPC call returns when containerd has done the work (StartContainer: the task runs),
and ``ctr`` runs under ``subprocess.run`` without a timeout (a blocking wait for its exit, which comes
once the task runs); no polling, whose sleeps would round the figures up. Stop and removal are not
timed. Needs root. Prints median and best in ms, each phase's median, and ratios.
Usage: python -m bench.k8s [--rounds N] [--only TEXT]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.fakespec import BenchError, checked, node_with_spec
from cdictk.dra.cdinames import claim_specs
from cdictk.runtime.launchers import install_launchers
from cdictk.runtime.shimfront import written_front
from tests.e2e.conftest import DEBIAN_ROOTFS
from tests.e2e.daemons import SID_CONTAINERD_DIR, Containerd, containerd_daemon
from tests.e2e.kubelet.allocator import AllocationError, Allocator, Pod
from tests.e2e.kubelet.apiserver import ApiServer, running
from tests.e2e.kubelet.draplugin import PluginProcess, plugin_command
from tests.e2e.kubelet.images import docker_archive, pause_archive

if TYPE_CHECKING:
    from cdictk.deviceplugin.proto.deviceplugin_pb2 import ContainerAllocateResponse
    from tests.e2e.kubelet.cri import CriClient
    from tests.e2e.kubelet.dra import DraKubelet
    from tests.e2e.kubelet.kubelet import Kubelet
    from tests.fakenode.node import FakeNode

ROUNDS = 20
GPU = "nvidia.com/gpu"
HANDLER = "cdictk"
DEBIAN = "localhost/cdictk-bench-debian:1"
CTR_RUN = "ctr run --detach (no pod, no GPU)"
POD = "pod, no GPU"
POD_OFF = "pod, no GPU, runc (CDI off)"
POD_CLASS = "pod, no GPU, RuntimeClass cdictk (CDI off)"
POD_SCRIPT = "pod, no GPU, cdictk as console script (CDI off)"
SCRIPT_HANDLER = "cdictk-script"
FIELD = "GPU: CDI_devices field (containerd's CDI)"
ANNOTATIONS = "GPU: cdi.k8s.io annotations (containerd's CDI)"
CLASS_ANNOTATIONS = "GPU: RuntimeClass cdictk, annotations (CDI off)"
CLASS_MOUNTS = "GPU: RuntimeClass cdictk, volume-mounts (CDI off)"
DRA = "GPU: DRA claim, CDI_devices (containerd's CDI)"
DRA_DRIVER = "gpu.nvidia.com"
DRA_NODE = "bench-node"
DRA_NAMESPACE = "default"
ALLOCATION = "claim allocated"  # the scheduler stand-in's: a phase apart, before the row's figure
POD_PHASES = ("RunPodSandbox", "CreateContainer", "StartContainer")
PHASES = (ALLOCATION, "Allocate", "NodePrepareResources", *POD_PHASES)


@dataclass
class Row:
    name: str
    floor: str  # the row this one is compared with (the same containerd and runtime, no GPU)
    versus: str = ""  # another GPU path on the same containerd it is compared with too
    samples: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="time only the rows whose name holds TEXT (repeatable), with their floors and ctr run",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.k8s: needs root (containerd, mknod'd nodes, runc)", file=sys.stderr)
        return 1
    try:
        return measure(args.rounds, args.only)
    except BenchError as exc:
        print(f"bench.k8s: {exc}", file=sys.stderr)
        return 1


def measure(rounds: int, only: list[str]) -> int:
    if not (SID_CONTAINERD_DIR / "containerd").exists():
        raise BenchError(f"{SID_CONTAINERD_DIR}/containerd is missing (tests/setup-host.sh fetches it)")
    if not (DEBIAN_ROOTFS / "sbin" / "ldconfig").exists():
        raise BenchError(f"{DEBIAN_ROOTFS} is missing (tests/setup-host.sh builds it)")
    with tempfile.TemporaryDirectory(prefix="cdictk-bench-k8s-") as scratch, setup(Path(scratch)) as bench:
        rows = bench.rows()
        if only:
            chosen = _chosen(rows, only)
            rows = [row for row in rows if row.name in chosen]
        for round_number in range(rounds + 1):
            order = rows[round_number % len(rows) :] + rows[: round_number % len(rows)]
            for row in order:
                took, phases = bench.start(row.name, verify=not round_number)
                if round_number:
                    row.samples.append(took)
                    for phase, ms in phases.items():
                        row.phases.setdefault(phase, []).append(ms)
        report(rows, rounds)
    return 0


def _chosen(rows: list[Row], only: list[str]) -> set[str]:
    """The rows whose name holds one of ``only``, the rows they are compared with, and ``ctr run``."""
    chosen = {row.name for row in rows if any(text in row.name for text in only)}
    chosen |= {other for row in rows if row.name in chosen for other in (row.floor, row.versus)}
    return (chosen | {CTR_RUN}) - {""}


def report(rows: list[Row], rounds: int) -> None:
    by_name = {row.name: row for row in rows}
    ctr = statistics.median(by_name[CTR_RUN].samples)
    print(f"The kubelet's first call to a running container, {rounds} rounds round-robin, ms: median (best)")
    print(f"  {'path':<50} {'median':>8} {'best':>8} {'/ ctr run':>10} {'/ its floor':>12} {'+ ms':>8}")
    for row in rows:
        median = statistics.median(row.samples)
        ratio = over = ""
        if row.floor:
            times, paired = _against(row, by_name[row.floor])
            ratio, over = f"{times:>11.2f}x", f"{paired:>+8.1f}"
        figures = f"{median:>8.1f} {min(row.samples):>8.1f} {median / ctr:>9.2f}x"
        print(f"  {row.name:<50} {figures} {ratio:>12} {over:>8}")
    print(
        "its floor: the same containerd and handler without a GPU (for a pod without one, runc there); "
        "+ ms: the median of each round's difference to it"
    )
    for row in (row for row in rows if row.versus):
        times, paired = _against(row, by_name[row.versus])
        print(f"{row.name}: {times:.2f}x, {paired:+.1f} ms paired, over {row.versus}")
    print("each phase's median, ms:")
    widths = {phase: max(15, len(phase)) for phase in PHASES}
    print(f"  {'path':<50}" + "".join(f" {phase:>{widths[phase]}}" for phase in PHASES))
    for row in rows:
        if row.phases:
            cells = "".join(
                f" {statistics.median(row.phases[p]):>{widths[p]}.1f}"
                if p in row.phases
                else f" {'':>{widths[p]}}"
                for p in PHASES
            )
            print(f"  {row.name:<50}{cells}")
    if any(ALLOCATION in row.phases for row in rows):
        print(f"{ALLOCATION}: the scheduler stand-in's (CEL in cel-python), not in the figures above")


def _against(row: Row, other: Row) -> tuple[float, float]:
    """``row``'s median over ``other``'s, and the median of each round's difference to it in ms."""
    # Paired by round: the load of a shared machine drifts between rounds more than within one.
    paired = statistics.median(mine - theirs for mine, theirs in zip(row.samples, other.samples, strict=True))
    return statistics.median(row.samples) / statistics.median(other.samples), paired


# ---- the set-up --------------------------------------------------------------------------------------


Start = Callable[[bool], tuple[float, dict[str, float]]]


@dataclass
class Bench:
    ctr: Callable[[], tuple[float, dict[str, float]]]
    pod: dict[str, Start]  # called with whether to look inside the container (the warm-up round)

    def rows(self) -> list[Row]:
        floors = {POD: "", POD_OFF: "", POD_CLASS: POD_OFF, POD_SCRIPT: POD_OFF, FIELD: POD, ANNOTATIONS: POD}
        floors |= {CLASS_ANNOTATIONS: POD_CLASS, CLASS_MOUNTS: POD_CLASS, DRA: POD}
        versus = {DRA: FIELD}
        return [Row(CTR_RUN, ""), *(Row(name, floors[name], versus.get(name, "")) for name in self.pod)]

    def start(self, name: str, *, verify: bool) -> tuple[float, dict[str, float]]:
        return self.ctr() if name == CTR_RUN else self.pod[name](verify)


@contextlib.contextmanager
def setup(scratch: Path) -> Iterator[Bench]:
    # gRPC imported here, after its fork handlers are turned off as the command turns them off: the
    # plugins' discovery forks NVML's child beside the other's threads, and the handlers only log.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    from cdictk.deviceplugin.proto.deviceplugin_pb2 import ContainerAllocateResponse  # noqa: PLC0415
    from cdictk.node.gpuhealth import HealthPolicy  # noqa: PLC0415
    from tests.e2e.kubelet.cri import CriClient  # noqa: PLC0415
    from tests.e2e.kubelet.kubelet import Kubelet  # noqa: PLC0415
    from tests.e2e.kubelet.nodeplugin import serve  # noqa: PLC0415

    node, spec_dir = node_with_spec(scratch, "eight")
    gpu = node.preset.gpus[1].uuid  # a whole GPU (GPU 0 is in MIG mode)
    node_name = f"nvidia{node.preset.gpus[1].minor}"
    pause = pause_archive(scratch / "images")
    debian = scratch / "images" / "debian.tar"
    docker_archive(DEBIAN_ROOTFS, debian, DEBIAN, cmd=["sleep", "infinity"])
    shim_config = scratch / "cdictk-config.toml"
    shim_config.write_text(
        f'[runtime]\nruntimes = ["/usr/sbin/runc"]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n'
        "[requests]\naccept-volume-mounts = true\n"
    )
    launcher = _shim_front(scratch / "launchers", shim_config)
    script = _console_script(scratch / "launchers", shim_config)
    configs = {
        True: _containerd_config(scratch / "cdi-on", {HANDLER: launcher}, spec_dir, True),
        False: _containerd_config(
            scratch / "cdi-off", {HANDLER: launcher, SCRIPT_HANDLER: script}, spec_dir, False
        ),
    }
    stop = threading.Event()
    plugin_dirs = [tempfile.mkdtemp(prefix="cdictk-bench-dp-", dir="/tmp") for _ in range(2)]
    kubelets: list[Kubelet] = []
    try:
        with (
            containerd_daemon(SID_CONTAINERD_DIR, configs[True]) as on,
            containerd_daemon(SID_CONTAINERD_DIR, configs[False]) as off,
            running() as server,
            contextlib.ExitStack() as stack,  # the DRA plugin's: stopped before the API server
        ):
            for daemon, cdi in ((on, True), (off, False)):
                runtime = daemon.dump_config()["plugins"]["io.containerd.cri.v1.runtime"]
                handlers = {HANDLER} if cdi else {HANDLER, SCRIPT_HANDLER}
                if runtime["enable_cdi"] is not cdi or not handlers <= set(runtime["containerd"]["runtimes"]):
                    raise BenchError(
                        f"containerd's config is not as meant: enable_cdi {runtime['enable_cdi']}"
                    )
                for archive in (pause, debian):
                    imported = daemon.ctr("images", "import", str(archive), namespace="k8s.io", timeout=600)
                    if imported.returncode != 0:
                        raise BenchError(f"ctr images import {archive.name}: {imported.stderr.strip()}")
            strategies_each = (("cdi-cri", "cdi-annotations"), ("volume-mounts",))
            for plugin_dir, strategies in zip(plugin_dirs, strategies_each, strict=True):
                kubelet = Kubelet(plugin_dir)
                kubelet.start()
                kubelets.append(kubelet)
                serve(
                    kubelet,
                    node,
                    spec_dir,
                    stop,
                    list_strategies=strategies,
                    health=HealthPolicy(enabled=False),
                )
                kubelet.wait_for("the plugin", lambda k: bool(k.devices(GPU)))
            names, mounts = kubelets
            dra = stack.enter_context(_dra(scratch, node, spec_dir, server))
            clients = {True: CriClient(str(on.socket)), False: CriClient(str(off.socket))}

            def allocate(kubelet: Kubelet, keep: str) -> Callable[[], ContainerAllocateResponse]:
                def call() -> ContainerAllocateResponse:
                    answer = kubelet.allocate_ids(GPU, [gpu])
                    if keep == "field":
                        return ContainerAllocateResponse(cdi_devices=answer.cdi_devices)
                    if keep == "annotations":
                        return ContainerAllocateResponse(annotations=answer.annotations)
                    return answer

                return call

            def pod(on: bool, kubelet: Kubelet | None, keep: str, handler: str) -> Start:
                call = allocate(kubelet, keep) if kubelet is not None else None
                return lambda verify: _pod(clients[on], call, handler, node_name if verify else None)

            pods = {
                POD: pod(True, None, "", ""),
                FIELD: pod(True, names, "field", ""),
                ANNOTATIONS: pod(True, names, "annotations", ""),
                POD_OFF: pod(False, None, "", ""),
                POD_CLASS: pod(False, None, "", HANDLER),
                POD_SCRIPT: pod(False, None, "", SCRIPT_HANDLER),
                CLASS_ANNOTATIONS: pod(False, names, "annotations", HANDLER),
                CLASS_MOUNTS: pod(False, mounts, "all", HANDLER),
                DRA: lambda verify: _dra_pod(dra, clients[True], verify=verify),
            }
            try:
                yield Bench(lambda: _ctr_run(on), pods)
            finally:
                for client in clients.values():
                    client.close()
    finally:
        stop.set()
        for kubelet in kubelets:
            kubelet.stop()
        for directory in plugin_dirs:
            shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Dra:
    """The DRA side of the node: the API server stand-in, the kubelet stand-in's DRA manager with
    ``cdictk dra-plugin`` registered, the scheduler stand-in, and where the claims' specs go."""

    server: ApiServer
    kubelet: DraKubelet
    allocator: Allocator
    spec_dir: Path


@contextlib.contextmanager
def _dra(scratch: Path, node: FakeNode, spec_dir: Path, server: ApiServer) -> Iterator[Dra]:
    """``cdictk dra-plugin`` for ``node``, its claims' specs in ``spec_dir`` (which the CDI-on
    containerd reads), registered with a kubelet stand-in and its slices published; stopped after."""
    from tests.e2e.kubelet.dra import DraKubelet  # noqa: PLC0415 - gRPC (see setup)

    # Sockets want short paths: the registry and the plugin's own directory under /tmp.
    top = Path(tempfile.mkdtemp(prefix="cdictk-bench-dra-", dir="/tmp"))
    server.add_node(DRA_NODE)
    kubeconfig = server.write_kubeconfig(scratch / "kubeconfig")
    kubelet = DraKubelet(str(top / "registry"), server)
    kubelet.start()
    # The default resync, not the tests' second: no listing of slices beside the timed calls.
    paths = {"registry": top / "registry", "plugin_dir": top / "plugin", "cdi_dir": spec_dir}
    command = plugin_command(node, DRA_NODE, kubeconfig=kubeconfig, resync=30.0, **paths)
    plugin = PluginProcess(command, scratch / "dra-plugin.log")
    plugin.start()
    try:
        plugin.wait_for("published ")
        kubelet.wait_for("the DRA plugin", lambda k: DRA_DRIVER in k.drivers)
        yield Dra(server, kubelet, Allocator(server), spec_dir)
    finally:
        code = plugin.stop() if plugin.process is not None else 0
        kubelet.stop()
        shutil.rmtree(top, ignore_errors=True)
    if code != 0:
        raise BenchError(f"cdictk dra-plugin exited {code}: {plugin.text().strip()}")


def _shim_front(directory: Path, config: Path) -> str:
    """``cdictk-runtime`` as a node has it, with ``config`` in place of ``/etc/cdictk/config.toml``: the
    launchers, and a shell front written from ``config`` that execs runc itself for what asks for no
    GPU, else a wrapper that names ``config`` to the Python launcher (``CDICTK_CONFIG`` set for the
    front would send every command to Python, as a changed settings file does)."""
    python_launcher = install_launchers(str(directory))[0]
    assert python_launcher.endswith("/cdictk-runtime.py"), python_launcher
    wrapper = directory / "cdictk-runtime-bench.sh"
    wrapper.write_text(
        f'#!/bin/sh\nCDICTK_CONFIG={shlex.quote(str(config))} exec {shlex.quote(python_launcher)} "$@"\n'
    )
    wrapper.chmod(0o755)
    front = directory / "cdictk-runtime-bench"
    text, problem = written_front(str(front), str(wrapper), written_by="bench.k8s", config=str(config))
    if problem is not None:
        raise BenchError(problem)
    front.write_text(text)
    front.chmod(0o755)
    os.utime(config, (time.time() - 10, time.time() - 10))  # not newer than the front: its shortcuts hold
    return str(front)


def _console_script(directory: Path, config: Path) -> str:
    """pip's ``cdictk-runtime`` (Python with ``site`` on every command), in a wrapper that names
    ``config`` to it."""
    from cdictk.cli.runtime import console_script  # noqa: PLC0415

    script = console_script()
    if not os.access(script, os.X_OK):
        raise BenchError(f"{script} is missing: run the bench from the venv (make bench-k8s)")
    wrapper = directory / "cdictk-runtime-script.sh"
    wrapper.write_text(
        f'#!/bin/sh\nCDICTK_CONFIG={shlex.quote(str(config))} exec {shlex.quote(script)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def _containerd_config(work: Path, handlers: dict[str, str], spec_dir: Path, cdi: bool) -> str:
    """A containerd 2.x config as the e2e test's, configured by ``cdictk runtime configure``, once for
    each handler (name: the program); with CDI on or off."""
    from tests.e2e.kubelet.kubelet import containerd_config  # noqa: PLC0415 - gRPC (see setup)

    base = work / "config.toml"
    base.parent.mkdir(parents=True)
    base.write_text(containerd_config(work / "runc", enable_cdi=cdi))
    for name, program in handlers.items():
        configure = [
            sys.executable, "-m", "cdictk", "runtime", "configure", "--runtime", "containerd",
            "--config", str(base), "--runtime-path", program, "--runtime-name", name,
            "--cdi-spec-dir", str(spec_dir),
        ]  # fmt: skip
        checked(
            subprocess.run(
                [*configure, "--enable-cdi"] if cdi else configure,
                capture_output=True,
                text=True,
                check=False,
            )
        )
    return base.read_text()


# ---- one start each ---------------------------------------------------------------------------------


def _pod(
    client: CriClient,
    allocate: Callable[[], ContainerAllocateResponse] | None,
    handler: str,
    gpu_node: str | None,
    *,
    first: str = "Allocate",
) -> tuple[float, dict[str, float]]:
    """``allocate`` (when a GPU is asked for; the phase ``first``), then the kubelet's calls for a
    one-container pod; the time until StartContainer returns, and each call's. With ``gpu_node``, then
    a look inside: the GPU's node there when one was allocated, no GPU node otherwise. The pod is then
    stopped and removed, untimed."""
    from tests.e2e.kubelet import cri_pb2 as cri  # noqa: PLC0415 - gRPC (see setup)
    from tests.e2e.kubelet.kubelet import container_config, remove_pod, sandbox_config  # noqa: PLC0415

    sandbox = sandbox_config()
    marks = [time.perf_counter()]
    answers = [allocate()] if allocate is not None else []
    marks.append(time.perf_counter())
    sandbox_id = client.runtime.RunPodSandbox(
        cri.RunPodSandboxRequest(config=sandbox, runtime_handler=handler), timeout=client.timeout
    ).pod_sandbox_id
    marks.append(time.perf_counter())
    container_id = ""
    try:
        config = container_config("main", DEBIAN, ["sleep", "3600"], answers)
        request = cri.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox)
        container_id = client.runtime.CreateContainer(request, timeout=client.timeout).container_id
        marks.append(time.perf_counter())
        client.runtime.StartContainer(
            cri.StartContainerRequest(container_id=container_id), timeout=client.timeout
        )
        marks.append(time.perf_counter())
        status = client.runtime.ContainerStatus(
            cri.ContainerStatusRequest(container_id=container_id), timeout=client.timeout
        ).status
        if status.state != cri.CONTAINER_RUNNING:
            raise BenchError(f"the pod's container is not running: {status}")
        if gpu_node is not None:
            listed = client.runtime.ExecSync(
                cri.ExecSyncRequest(container_id=container_id, cmd=["ls", "/dev"], timeout=30), timeout=60
            )
            found = {name for name in listed.stdout.decode().split() if name.startswith("nvidia")}
            if allocate is not None and gpu_node not in found:
                raise BenchError(f"{handler or 'runc'}: the pod has no /dev/{gpu_node} ({sorted(found)})")
            if allocate is None and found:
                raise BenchError(f"{handler or 'runc'}: a pod without a GPU has {sorted(found)}")
    finally:
        remove_pod(client, sandbox_id, container_id)
    phases = {phase: (marks[n + 1] - marks[n]) * 1000 for n, phase in enumerate((first, *POD_PHASES))}
    if allocate is None:
        del phases[first]
    return (marks[-1] - marks[0]) * 1000, phases


def _dra_pod(dra: Dra, client: CriClient, *, verify: bool) -> tuple[float, dict[str, float]]:
    """A new claim for one GPU, allocated by the scheduler stand-in (a phase of its own, outside the
    figure), then :func:`_pod` with ``NodePrepareResources`` and the answered CDI names as the
    container's ``CDI_devices``. After it, untimed: the claim unprepared (its spec gone, checked in
    the warm-up), released and deleted."""
    from cdictk.deviceplugin.proto.deviceplugin_pb2 import (  # noqa: PLC0415 - gRPC (see setup)
        CDIDevice,
        ContainerAllocateResponse,
    )
    from tests.e2e.kubelet.dra import DraError, container_cdi_ids  # noqa: PLC0415

    name, pod_uid = f"bench-{uuid.uuid4().hex[:12]}", str(uuid.uuid4())
    claim = dra.server.put_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": DRA_NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]}},
        }
    )
    claim_uid = str(claim["metadata"]["uid"])

    def prepare() -> ContainerAllocateResponse:
        prepared = dra.kubelet.prepare(pod_uid, [(DRA_NAMESPACE, name)])
        ids = container_cdi_ids(prepared, claim_uid)
        return ContainerAllocateResponse(cdi_devices=[CDIDevice(name=i) for i in ids])

    try:
        began = time.perf_counter()
        allocated = dra.allocator.allocate(
            DRA_NAMESPACE, name, DRA_NODE, [Pod(f"pod-{pod_uid[:8]}", pod_uid)]
        )
        allocating = (time.perf_counter() - began) * 1000
        [result] = allocated["status"]["allocation"]["devices"]["results"]
        gpu_node = f"nvidia{result['device'].split('-')[1]}"  # gpu-<minor>
        try:
            took, phases = _pod(
                client, prepare, "", gpu_node if verify else None, first="NodePrepareResources"
            )
        finally:
            dra.kubelet.unprepare(pod_uid)
            dra.allocator.release(DRA_NAMESPACE, name, pod_uid)
    except (AllocationError, DraError) as error:
        raise BenchError(f"DRA: {error}") from None
    finally:
        dra.server.delete_claim(DRA_NAMESPACE, name)
    if verify and os.path.exists(claim_specs(str(dra.spec_dir)).path(claim_uid)):
        raise BenchError(f"DRA: the spec of claim {claim_uid} is left after NodeUnprepareResources")
    return took, {ALLOCATION: allocating, **phases}


def _ctr_run(containerd: Containerd) -> tuple[float, dict[str, float]]:
    """``ctr run --detach`` of the image, until ctr exits (the task runs); then killed and removed."""
    name = f"cdictk-bench-{uuid.uuid4().hex[:12]}"
    ctr = [str(containerd.binary_dir / "ctr"), "--address", str(containerd.socket), "--namespace", "k8s.io"]
    run = [
        *ctr, "run", "--detach", "--runc-root", str(containerd.root / "runc"),
        "--fifo-dir", str(containerd.root / "fifo"), DEBIAN, name, "sleep", "3600",
    ]  # fmt: skip
    log = containerd.root / "ctr-run.log"
    try:
        with open(log, "wb") as out:
            began = time.perf_counter()
            result = subprocess.run(
                run, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=containerd.env, check=False
            )
            took = (time.perf_counter() - began) * 1000
        if result.returncode != 0:
            raise BenchError(f"ctr run exited {result.returncode}: {log.read_text(errors='replace').strip()}")
    finally:
        for command in (("task", "kill", "--signal", "SIGKILL", name), ("task", "delete", "--force", name)):
            subprocess.run([*ctr, *command], capture_output=True, env=containerd.env, check=False)
        subprocess.run(
            [*ctr, "container", "delete", name], capture_output=True, env=containerd.env, check=False
        )
    return took, {}


if __name__ == "__main__":
    sys.exit(main())
