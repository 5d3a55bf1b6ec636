"""The plugin's run on the fake eight-GPU node (GPU 0 in MIG mode), in a thread, against the API server
stand-in through the real client and a kubeconfig: the DRA service up before the registration socket,
the kubelet's GetInfo and Notify, the slices published, a claim prepared, the slices written again
after the kubelet wipes them or the MIG layout changes, a v1beta1-only server, health (an Xid and a
lost GPU tainting the device under a new generation, their recovery untainting it), and a stop that
removes the sockets and leaves claims and slices."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdictk.dra import kubeletplugin as plugin_module
from cdictk.dra.kubeletapi import dra_v1_pb2 as v1
from cdictk.dra.kubeletapi import dra_v1_pb2_grpc as v1_grpc
from cdictk.dra.kubeletapi.pluginregistration_pb2 import InfoRequest, PluginInfo, RegistrationStatus
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import RegistrationStub
from cdictk.dra.kubeletplugin import DraPlugin, PluginSettings
from cdictk.node.gpuhealth import HealthPolicy
from cdictk.startpath.helpers.errors import CdictkError
from tests.conftest import NodeFactory
from tests.e2e.kubelet.apiserver import ApiServer, running
from tests.fakenode.node import FakeNode

pytestmark = pytest.mark.root

DRIVER = "gpu.nvidia.com"
NODE = "node1"
BOOT = "5d0c4a8e-2b1f-4c3d-9e8f-7a6b5c4d3e2f"
HOOK = "/opt/cdictk/current/bin/cdictk-hook"  # the DaemonSet's, as the node runs it


def wait_for(what: str, condition: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def with_boot_id(node: FakeNode) -> FakeNode:
    path = Path(node.proc, "sys/kernel/random/boot_id")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BOOT + "\n")
    return node


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin_module, "LOOK_INTERVAL", 0.05)
    monkeypatch.setattr(plugin_module, "RESCAN", 0.1)
    monkeypatch.setattr(plugin_module, "RETRY", 0.1)


@pytest.fixture
def dirs() -> Iterator[Path]:
    # Under /tmp: a Unix socket path has 107 bytes, and pytest's paths grow with test names.
    path = Path(tempfile.mkdtemp(prefix="cdictk-dra-", dir="/tmp"))
    (path / "registry").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Run:
    """A plugin running in a thread until :meth:`stop`; its log lines."""

    def __init__(self, settings: PluginSettings) -> None:
        self.settings = settings
        self.lines: list[str] = []
        self.plugin = DraPlugin(settings, self.lines.append)
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.plugin.run(self.stopping)
        except BaseException as error:
            self.error = error
            raise

    def said(self, line: str) -> int:
        return self.lines.count(line)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def settings(node: FakeNode, dirs: Path, server: ApiServer, **more: Any) -> PluginSettings:
    return PluginSettings(
        node_name=NODE,
        driver=DRIVER,
        kubeconfig=str(server.write_kubeconfig(dirs / "kubeconfig")),
        registry_dir=str(dirs / "registry"),
        plugin_dir=str(dirs / "plugin"),
        cdi_dir=str(dirs / "cdi"),
        driver_root=node.root,
        proc_root=node.proc,
        sys_root=node.sys,
        **more,
    )


def register(registry: Path) -> PluginInfo:
    """The kubelet's plugin watcher: GetInfo, then Notify(registered)."""
    with grpc.insecure_channel(f"unix://{registry}/{DRIVER}-reg.sock") as channel:
        stub = RegistrationStub(channel)
        info = stub.GetInfo(InfoRequest(), timeout=5)
        stub.NotifyRegistrationStatus(RegistrationStatus(plugin_registered=True), timeout=5)
    return info


def slice_devices(server: ApiServer) -> list[str]:
    return sorted(d["name"] for item in server.slices.values() for d in item["spec"].get("devices") or [])


def claim(name: str, device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "team", "name": name},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]}
            }
        },
    }


def test_it_serves_registers_publishes_prepares_and_stops_leaving_claims_and_slices(
    make_node: NodeFactory, dirs: Path
) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server, hook_path=HOOK))
        try:
            wait_for("the registration socket", (dirs / "registry" / f"{DRIVER}-reg.sock").exists)
            # the DRA service listens before the kubelet can learn of it
            assert (dirs / "plugin" / "dra.sock").is_socket()
            info = register(dirs / "registry")
            assert (info.type, info.name, info.endpoint) == (
                "DRAPlugin",
                DRIVER,
                str(dirs / "plugin/dra.sock"),
            )
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
            wait_for("registered", lambda: run.said("registered with the kubelet") == 1)
            wait_for("the slices", lambda: any(line.startswith("published ") for line in run.lines))
            devices = [device.name for device in run.plugin.devices]
            assert run.said(f"published {len(devices)} device(s) in 1 ResourceSlice(s)") == 1
            assert slice_devices(server) == devices
            assert "gpu-1" in devices and not any(name == "gpu-0" for name in devices)  # GPU 0 is in MIG mode
            [published] = server.slices.values()
            assert published["apiVersion"] == "resource.k8s.io/v1"
            assert published["spec"]["pool"]["name"] == NODE
            uid = server.put_claim(claim("a", "gpu-1"))["metadata"]["uid"]
            with grpc.insecure_channel(f"unix://{dirs}/plugin/dra.sock") as channel:
                answer = v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                    v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="team", name="a", uid=uid)]),
                    timeout=30,
                )
            assert answer.claims[uid].error == ""
            assert list(answer.claims[uid].devices[0].cdi_device_ids) == [
                f"k8s.gpu.nvidia.com/claim={uid}-gpu-1"
            ]
        finally:
            run.stop()
        assert run.error is None
        assert not os.path.lexists(dirs / "registry" / f"{DRIVER}-reg.sock")
        assert not os.path.lexists(dirs / "plugin" / "dra.sock")
        assert slice_devices(server) == devices  # the kubelet wipes them once the plugin stays away
        assert os.listdir(dirs / "cdi") == [f"k8s.gpu.nvidia.com-claim_{uid}.json"]  # its pod runs on
        spec = json.loads((dirs / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json").read_text())
        assert {hook["path"] for hook in spec["containerEdits"]["hooks"]} == {HOOK}
        assert uid in (dirs / "plugin" / "checkpoint.json").read_text()
        assert run.said("registered with the kubelet") == 1


def test_slices_the_kubelet_wipes_are_published_again(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server, resync=0.2))
        try:
            wait_for("the slices", lambda: any(line.startswith("published ") for line in run.lines))
            writes = len(server.writes)
            time.sleep(0.5)  # resyncs of slices that say what the devices say write nothing
            assert len(server.writes) == writes
            server.wipe(NODE)
            wait_for(
                "the slices again", lambda: sum(line.startswith("published ") for line in run.lines) == 2
            )
            assert slice_devices(server) == [device.name for device in run.plugin.devices]
        finally:
            run.stop()


def test_a_mig_change_is_published(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server))
        try:
            wait_for("the slices", lambda: server.slices)
            before = slice_devices(server)
            node.reconfigure_mig(node.preset.migs[1:])  # one MIG device destroyed
            wait_for("the change", lambda: slice_devices(server) != before)
            after = [device.name for device in run.plugin.devices]
            assert slice_devices(server) == after
            assert len(after) == len(before) - 1
            assert "the node changed (driver, GPUs or MIG); discovering it again" in run.lines
            [published] = server.slices.values()
            assert published["spec"]["pool"]["generation"] == 2
        finally:
            run.stop()


QUICK_HEALTH = HealthPolicy(probe_interval=0.1, xid_recovery=1.0)


def pool_taints(server: ApiServer) -> tuple[int, dict[str, list[tuple[str, str, str]]]]:
    """The pool's generation, and the taints of each tainted device (key, value, effect)."""
    [published] = server.slices.values()
    found = {
        device["name"]: [(t["key"], t.get("value", ""), t["effect"]) for t in device["taints"]]
        for device in published["spec"].get("devices") or []
        if device.get("taints")
    }
    return published["spec"]["pool"]["generation"], found


def gpu_device(run: Run, index: int) -> tuple[str, str]:
    """The published name and the UUID of the node's GPU ``index``."""
    gpu = next(gpu for gpu in run.plugin.node.facts().gpus if gpu.index == index)
    return f"gpu-{gpu.minor}", gpu.uuid


def test_an_xid_taints_the_device_under_a_new_generation_until_it_recovers(
    make_node: NodeFactory, dirs: Path
) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server, health=QUICK_HEALTH))
        try:
            wait_for("the slices", lambda: server.slices)
            wait_for("the NVML watcher", lambda: run.plugin.health.probes > 0)
            generation, tainted = pool_taints(server)
            assert tainted == {}
            name, uuid = gpu_device(run, 3)
            node.nvml_event("xid gpu=2 xid=13")  # an application error: no taint
            node.nvml_event("xid gpu=3 xid=79")
            wait_for("the taint", lambda: pool_taints(server)[1])
            assert pool_taints(server) == (
                generation + 1,
                {name: [("gpu.nvidia.com/xid", "79", "NoSchedule")]},
            )
            wait_for("the recovery", lambda: not pool_taints(server)[1])
            assert pool_taints(server)[0] == generation + 2
            node.nvml_event("lost gpu=3")
            wait_for("the lost GPU", lambda: pool_taints(server)[1])
            assert pool_taints(server) == (
                generation + 3,
                {name: [("gpu.nvidia.com/gpu-lost", "", "NoSchedule")]},
            )
            node.nvml_event("recover gpu=3")
            wait_for("the GPU back", lambda: not pool_taints(server)[1])
            health = [line for line in run.lines if line.startswith(("Xid", "GPU-"))]
            assert health[1:] == [
                f"Xid 79 on {uuid}",
                f"{uuid} unhealthy: Xid 79",
                f"Xid 79 on {uuid}: 1 s without another, its recovery is over",
                f"{uuid} healthy again",
                f"{uuid} unhealthy: GPU is lost",
                f"{uuid} healthy again",
            ]
            assert health[0].startswith("Xid 13 on ") and health[0].endswith("the GPU stays healthy")
        finally:
            run.stop()
        assert run.error is None


def test_taints_the_api_server_drops_are_said_once(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running(device_taints=False) as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server, health=QUICK_HEALTH, resync=0.2))
        try:
            wait_for("the slices", lambda: server.slices)
            wait_for("the NVML watcher", lambda: run.plugin.health.probes > 0)
            node.nvml_event("lost gpu=3")
            said = (
                "the API server dropped the devices' taints (its DRADeviceTaints feature gate is off): "
                "unhealthy devices are published without them"
            )
            wait_for("the line", lambda: run.said(said))
            writes = len(server.writes)
            time.sleep(0.6)  # resyncs: the slices say what can be said, nothing is written again
            assert len(server.writes) == writes and run.said(said) == 1
        finally:
            run.stop()


def test_without_health_nothing_is_tainted(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server, health=HealthPolicy(enabled=False)))
        try:
            wait_for("the slices", lambda: server.slices)
            node.nvml_event("lost gpu=3")
            time.sleep(0.5)
            assert pool_taints(server) == (1, {})
            assert run.plugin.health.probes == 0  # no NVML watcher at all
        finally:
            run.stop()


def test_a_v1beta1_server_gets_v1beta1_slices(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running(version="v1beta1") as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server))
        try:
            wait_for("the slices", lambda: server.slices)
            [published] = server.slices.values()
            assert published["apiVersion"] == "resource.k8s.io/v1beta1"
            assert "basic" in published["spec"]["devices"][0]
            assert "the API server serves resource.k8s.io/v1beta1" in run.lines
        finally:
            run.stop()


def test_a_removed_socket_is_served_again(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server))
        registration = dirs / "registry" / f"{DRIVER}-reg.sock"
        try:
            wait_for("the registration socket", registration.exists)
            register(dirs / "registry")
            wait_for("registered", lambda: run.said("registered with the kubelet") == 1)
            registration.unlink()
            wait_for("the socket again", registration.exists)
            assert f"{registration} was removed; serving the registration again" in run.lines
            register(dirs / "registry")  # the kubelet's watcher sees a new socket
            wait_for("registered again", lambda: run.said("registered with the kubelet") == 2)
        finally:
            run.stop()


def test_a_publish_that_fails_is_said_once_and_tried_again_soon(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:  # no Node yet: the slices' owner cannot be read
        run = Run(settings(node, dirs, server))
        try:
            wait_for(
                "the failure", lambda: any(line.startswith("publishing ResourceSlices") for line in run.lines)
            )
            time.sleep(0.3)
            failures = [line for line in run.lines if line.startswith("publishing ResourceSlices")]
            assert failures == [
                "publishing ResourceSlices failed (trying again in 0.1 s): read Node node1: 404 Not Found: "
                'nodes "node1" not found'
            ]
            server.add_node(NODE)
            wait_for("the slices", lambda: any(line.startswith("published ") for line in run.lines))
        finally:
            run.stop()


def test_each_registration_the_kubelet_notifies_is_logged(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        server.add_node(NODE)
        run = Run(settings(node, dirs, server))
        try:
            wait_for("the registration socket", (dirs / "registry" / f"{DRIVER}-reg.sock").exists)
            register(dirs / "registry")
            wait_for("registered", lambda: run.said("registered with the kubelet") == 1)
            register(dirs / "registry")  # a restarted kubelet finds the socket and registers it again
            wait_for("registered again", lambda: run.said("registered with the kubelet") == 2)
        finally:
            run.stop()


def test_an_api_server_out_of_reach_stops_the_start_in_one_line(make_node: NodeFactory, dirs: Path) -> None:
    node = with_boot_id(make_node("eight"))
    with running() as server:
        wanted = settings(node, dirs, server)
    # the server is gone: its port refuses
    with pytest.raises(CdictkError, match=r"^discovery of resource\.k8s\.io: ") as raised:
        DraPlugin(wanted, lambda line: None).run(threading.Event())
    assert "\n" not in str(raised.value)
    assert not (dirs / "registry" / f"{DRIVER}-reg.sock").exists()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"driver": "GPU.nvidia.com"}, "driver name: 'GPU.nvidia.com' is not a DNS subdomain"),
        ({"node_name": "node_1"}, "node name: 'node_1' is not a Kubernetes node name"),
        ({"plugin_dir": "/tmp/" + "d" * 100}, "longer than a Unix socket path may be"),
        ({"resync": 0}, "resync: must be above 0 seconds"),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(change: dict[str, Any], said: str) -> None:
    with pytest.raises(CdictkError, match=said):
        DraPlugin(PluginSettings(**{"node_name": NODE, **change}), lambda line: None)
