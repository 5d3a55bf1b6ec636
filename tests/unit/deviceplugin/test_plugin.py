"""The device plugin on the fake eight-GPU node, against the kubelet stand-in: registration and
re-registration, the lists it sends, Allocate, preferred allocation, health, MIG strategies and changes,
replicas."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from cdictk.deviceplugin.kubelet import HEALTHY, UNHEALTHY
from cdictk.deviceplugin.plugin import DevicePlugin
from cdictk.deviceplugin.pluginsettings import Replicas, Settings
from cdictk.deviceplugin.resources import ResourceError
from cdictk.node.gpuhealth import HealthPolicy
from tests.conftest import NodeFactory
from tests.e2e.kubelet.kubelet import Kubelet
from tests.e2e.kubelet.nodeplugin import serve
from tests.fakenode.nvml import FakeMig
from tests.unit.deviceplugin.conftest import GPU, PluginFactory, generate_spec

pytestmark = pytest.mark.root

UUID = "GPU-4b1d0c2e-7a3f-4c55-9e21-0000000000{:02d}"
WHOLE = [UUID.format(i) for i in range(1, 8)]  # GPU 0 is in MIG mode


def registered(resources: list[str]) -> object:
    return lambda kubelet: all(kubelet.devices(r) for r in resources)


def test_registers_the_whole_gpus_by_uuid_with_numa_nodes(run_plugin: PluginFactory) -> None:
    running = run_plugin()
    kubelet = running.kubelet
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    request = kubelet.registrations[0]
    assert (request.version, request.resource_name, request.endpoint) == (
        "v1beta1",
        GPU,
        "cdictk-nvidia.com_gpu.sock",
    )
    devices = kubelet.devices(GPU)
    assert [d.ID for d in devices] == WHOLE
    assert {d.health for d in devices} == {HEALTHY}
    assert [d.topology.nodes[0].ID for d in devices if d.HasField("topology")] == [0, 0, 0, 1, 1, 1, 1]
    assert any("GPU 0" in line and "MIG mode" in line for line in running.lines)
    assert kubelet.endpoints[GPU].options.get_preferred_allocation_available


def test_allocate_answers_cdi_names_in_the_field_and_an_annotation_never_the_variable(
    run_plugin: PluginFactory,
) -> None:
    kubelet = run_plugin().kubelet
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    answer = kubelet.allocate_ids(GPU, [WHOLE[2], WHOLE[0]])
    names = [f"nvidia.com/gpu={WHOLE[2]}", f"nvidia.com/gpu={WHOLE[0]}"]
    assert [d.name for d in answer.cdi_devices] == names
    [(key, value)] = answer.annotations.items()
    assert key.startswith("cdi.k8s.io/cdictk-device-plugin_") and value == ",".join(names)
    assert answer.envs == {} and answer.mounts == [] and answer.devices == []
    # A second response gets another key: two resources of one container never clash.
    assert kubelet.allocate_ids(GPU, [WHOLE[1]]).annotations.keys() != answer.annotations.keys()


def test_allocate_refuses_unknown_devices_and_names_no_spec_defines(run_plugin: PluginFactory) -> None:
    import grpc

    running = run_plugin()
    kubelet = running.kubelet
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    with pytest.raises(grpc.RpcError) as unknown:
        kubelet.allocate_ids(GPU, ["GPU-nope"])
    assert "nvidia.com/gpu has no device GPU-nope" in str(unknown.value.details())
    (running.spec_dir / "nvidia.yaml").unlink()
    with pytest.raises(grpc.RpcError) as missing:
        kubelet.allocate_ids(GPU, [WHOLE[0]])
    assert f"no CDI spec defines nvidia.com/gpu={WHOLE[0]}" in str(missing.value.details())


def test_volume_mounts_strategy(run_plugin: PluginFactory) -> None:
    kubelet = run_plugin(list_strategies=("volume-mounts",)).kubelet
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    answer = kubelet.allocate_ids(GPU, [WHOLE[0]])
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.host_path, m.container_path) for m in answer.mounts] == [
        ("/dev/null", f"/var/run/nvidia-container-devices/{WHOLE[0]}")
    ]
    assert answer.cdi_devices == [] and answer.annotations == {}


def test_registers_again_when_the_kubelet_restarts(run_plugin: PluginFactory) -> None:
    kubelet = run_plugin().kubelet
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    kubelet.restart()  # every socket deleted, kubelet.sock made anew, no plugin known
    assert not kubelet.endpoints
    kubelet.wait_for("the plugin to register again", registered([GPU]))
    assert len(kubelet.registrations) == 2
    assert [d.ID for d in kubelet.devices(GPU)] == WHOLE


def test_preferred_allocation_keeps_nvlink_pairs_together(run_plugin: PluginFactory) -> None:
    kubelet = run_plugin().kubelet
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    kubelet.wait_for("the topology", lambda k: k.preferred(GPU, WHOLE, [], 2) != WHOLE[:2])
    # GPUs 2-3, 4-5 and 6-7 share four NVLinks; GPU 1 has none.
    assert kubelet.preferred(GPU, WHOLE, [], 2) == [UUID.format(2), UUID.format(3)]
    assert kubelet.preferred(GPU, WHOLE, [UUID.format(5)], 2) == [UUID.format(5), UUID.format(4)]
    # Four: both pairs of NUMA node 1 (a pair across nodes would score less).
    assert kubelet.preferred(GPU, WHOLE, [], 4) == [UUID.format(i) for i in (4, 5, 6, 7)]
    # Without NVLink, the same PCIe switch: GPU 1 goes with GPU 0's switch, then its NUMA node.
    assert kubelet.preferred(GPU, [UUID.format(1), UUID.format(3), UUID.format(5)], [UUID.format(1)], 2) == [
        UUID.format(1),
        UUID.format(3),
    ]


def test_health_xid_and_lost_gpus_go_unhealthy_and_recover(run_plugin: PluginFactory) -> None:
    running = run_plugin()
    kubelet, node = running.kubelet, running.node
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    kubelet.wait_for("the NVML watcher", lambda k: running.plugin.health.probes > 0)
    node.nvml_event("xid gpu=2 xid=13")  # an application error: ignored
    node.nvml_event("xid gpu=3 xid=79")
    kubelet.wait_for("GPU 3 unhealthy", lambda k: k.health(GPU)[UUID.format(3)] == UNHEALTHY)
    assert kubelet.health(GPU)[UUID.format(2)] == HEALTHY
    kubelet.wait_for(
        "GPU 3 healthy after the recovery time", lambda k: k.health(GPU)[UUID.format(3)] == HEALTHY
    )
    node.nvml_event("lost gpu=5")
    kubelet.wait_for("GPU 5 unhealthy", lambda k: k.health(GPU)[UUID.format(5)] == UNHEALTHY)
    node.nvml_event("recover gpu=5")
    kubelet.wait_for("GPU 5 healthy", lambda k: k.health(GPU)[UUID.format(5)] == HEALTHY)
    # a line for each change, and for the end of the Xid's recovery period
    health = [line for line in running.lines if line.startswith(("Xid", "GPU-"))]
    assert health == [
        f"Xid 13 on {UUID.format(2)}: an application error, the GPU stays healthy",
        f"Xid 79 on {UUID.format(3)}",
        f"{UUID.format(3)} unhealthy: Xid 79",
        f"Xid 79 on {UUID.format(3)}: 1 s without another, its recovery is over",
        f"{UUID.format(3)} healthy again",
        f"{UUID.format(5)} unhealthy: GPU is lost",
        f"{UUID.format(5)} healthy again",
    ]


def test_an_nvml_without_events_is_one_line_then_health_by_probes(run_plugin: PluginFactory) -> None:
    running = run_plugin(nvml_events=False)
    kubelet, node, health = running.kubelet, running.node, running.plugin.health
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    node.nvml_event("lost gpu=5")
    kubelet.wait_for("GPU 5 unhealthy", lambda k: k.health(GPU)[UUID.format(5)] == UNHEALTHY)
    node.nvml_event("recover gpu=5")
    kubelet.wait_for("GPU 5 healthy", lambda k: k.health(GPU)[UUID.format(5)] == HEALTHY)
    probes = health.probes
    kubelet.wait_for("ten more probes", lambda k: health.probes >= probes + 10)  # no restarts meanwhile
    assert [line for line in running.lines if "NVML" in line] == [
        "NVML has no events (Not Supported): health from probes alone, no Xids"
    ]
    assert {h for i, h in kubelet.health(GPU).items()} == {HEALTHY}
    assert f"{UUID.format(5)} unhealthy: GPU is lost" in running.lines


def test_the_first_preferred_allocation_after_registering_has_the_topology(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """Asked the moment the plugin registers, as a kubelet admitting waiting pods after the plugin
    restarted asks: the NVLink pair every time, never a pair by index."""
    node = make_node("eight")
    generate_spec(node, tmp_path / "cdi")
    for attempt in range(5):
        plugin_dir = tempfile.mkdtemp(prefix="cdictk-dp-", dir="/tmp")
        kubelet, stop = Kubelet(plugin_dir), threading.Event()
        kubelet.start()
        _, thread = serve(kubelet, node, tmp_path / "cdi", stop, rescan_interval=60.0)
        try:
            kubelet.wait_for("the registration", registered([GPU]))
            assert kubelet.preferred(GPU, WHOLE, [UUID.format(5)], 2) == [UUID.format(5), UUID.format(4)], (
                attempt
            )
            assert kubelet.preferred(GPU, WHOLE, [], 2) == [UUID.format(2), UUID.format(3)], attempt
        finally:
            stop.set()
            thread.join(timeout=30)
            kubelet.stop()
            shutil.rmtree(plugin_dir, ignore_errors=True)


def test_a_gpu_lost_when_the_node_is_discovered_again_stays_listed_unhealthy(
    run_plugin: PluginFactory,
) -> None:
    running = run_plugin()
    kubelet, node = running.kubelet, running.node
    kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    kubelet.wait_for("the NVML watcher", lambda k: running.plugin.health.probes > 0)
    node.nvml_event("lost gpu=5")
    kubelet.wait_for("GPU 5 unhealthy", lambda k: k.health(GPU)[UUID.format(5)] == UNHEALTHY)
    # a driver change (its ld cache rewritten) makes the plugin discover the node again, without GPU 5
    cache = Path(node.root, "etc/ld.so.cache")
    stat = cache.stat()
    os.utime(cache, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    kubelet.wait_for("the rescan", lambda k: any("GPU " + UUID.format(5) in line for line in running.lines))
    assert [d.ID for d in kubelet.devices(GPU)] == WHOLE
    assert kubelet.health(GPU)[UUID.format(5)] == UNHEALTHY
    assert {h for i, h in kubelet.health(GPU).items() if i != UUID.format(5)} == {HEALTHY}
    node.nvml_event("recover gpu=5")
    kubelet.wait_for("GPU 5 healthy", lambda k: k.health(GPU)[UUID.format(5)] == HEALTHY)
    assert [d.ID for d in kubelet.devices(GPU)] == WHOLE


def test_mixed_offers_mig_profiles_and_follows_mig_changes(run_plugin: PluginFactory) -> None:
    running = run_plugin(mig_strategy="mixed")
    kubelet, node = running.kubelet, running.node
    small, large = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
    kubelet.wait_for("three resources", registered([GPU, small, large]))
    assert [d.ID for d in kubelet.devices(small)] == [m.uuid for m in node.preset.migs[1:]]
    answer = kubelet.allocate_ids(small, [node.preset.migs[1].uuid])
    assert [d.name for d in answer.cdi_devices] == [f"nvidia.com/gpu={node.preset.migs[1].uuid}"]
    # nvidia-smi mig: the 3g.40gb instance destroyed, a 1g.10gb created in its place.
    new = dataclasses.replace(
        node.preset.migs[1], index=3, gi=9, uuid="MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000009"
    )
    migs: tuple[FakeMig, ...] = (*node.preset.migs[1:], new)
    node.reconfigure_mig(migs)
    kubelet.wait_for("the new MIG device", lambda k: len(k.devices(small)) == 3)
    kubelet.wait_for("3g.40gb gone", lambda k: k.endpoints[large].stream_ended)


def test_single_refuses_a_node_with_whole_gpus(make_node: NodeFactory) -> None:
    node = make_node("eight")
    settings = Settings(mig_strategy="single", driver_root=node.root, proc_root=node.proc, sys_root=node.sys)
    with pytest.raises(ResourceError, match="single needs every GPU in MIG mode or none: GPUs 1, 2, 3"):
        DevicePlugin(settings).discover()


def test_a_failed_rediscovery_is_tried_again_at_each_rescan_and_said_once(
    make_node: NodeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_node("eight")
    settings = Settings(
        mig_strategy="single",  # GPU 0 in MIG mode beside whole GPUs: discovery fails
        plugin_dir=str(tmp_path),
        driver_root=node.root,
        proc_root=node.proc,
        sys_root=node.sys,
    )
    lines: list[str] = []
    plugin = DevicePlugin(settings, lines.append)
    tries: list[int] = []
    discover = plugin.discover

    def counted() -> object:
        tries.append(1)
        return discover()

    monkeypatch.setattr(plugin, "discover", counted)
    for _ in range(3):
        plugin.look()
    assert len(tries) == 3
    assert len([line for line in lines if "discovery failed" in line]) == 1
    assert len([line for line in lines if "the node changed" in line]) == 1


def test_a_registration_that_keeps_failing_is_tried_at_each_look_and_said_once(
    make_node: NodeFactory,
) -> None:
    node = make_node("eight")
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-dp-", dir="/tmp")  # no kubelet.sock: nobody answers
    settings = Settings(plugin_dir=plugin_dir, driver_root=node.root, proc_root=node.proc, sys_root=node.sys)
    lines: list[str] = []
    plugin = DevicePlugin(settings, lines.append)
    try:
        plugin._reconcile(plugin.discover())
        plugin._register_all()
        for _ in range(3):
            plugin.look()
        failures = [line for line in lines if "no kubelet answers" in line]
        assert len(failures) == 1 and failures[0].endswith("(trying again every 1 s)")
        assert not plugin._registered
    finally:
        for server in plugin.servers.values():
            server.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)


def test_a_refused_registration_says_what_the_kubelet_answered(run_plugin: PluginFactory) -> None:
    import grpc

    running = run_plugin()
    running.kubelet.wait_for("nvidia.com/gpu", registered([GPU]))
    running.kubelet.refusal = (grpc.StatusCode.UNAVAILABLE, "failed to dial device plugin")
    running.kubelet.restart()  # a new kubelet.sock: the plugin registers again, and is refused
    refused = (
        f"registering {GPU}: the kubelet refused it: failed to dial device plugin (trying again every 1 s)"
    )
    running.kubelet.wait_for("the refusal", lambda k: refused in running.lines)
    assert not any("no kubelet answers" in line for line in running.lines)


def test_a_look_sends_the_list_when_an_xids_recovery_time_comes_without_waiting_for_a_probe(
    make_node: NodeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = make_node("eight")
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-dp-", dir="/tmp")
    settings = Settings(
        plugin_dir=plugin_dir,
        driver_root=node.root,
        proc_root=node.proc,
        sys_root=node.sys,
        health=HealthPolicy(xid_recovery=10.0),
    )
    plugin = DevicePlugin(settings, lambda line: None)
    now = [1000.0]
    monkeypatch.setattr(plugin.health, "clock", lambda: now[0])
    try:
        plugin._reconcile(plugin.discover())
        plugin._register_all()
        sent: list[int] = []
        monkeypatch.setattr(plugin.servers[GPU], "update", lambda resource=None: sent.append(1))
        plugin.health.feed({"xid": 79, "uuid": WHOLE[0], "gi": None, "ci": None})
        assert len(sent) == 1
        plugin.look(rescan=False)
        assert len(sent) == 1  # nothing changed
        now[0] += 10.0
        plugin.look(rescan=False)  # no probe came: the look alone sees the recovery
        assert len(sent) == 2 and plugin.health.unhealthy() == {}
    finally:
        for server in plugin.servers.values():
            server.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)


def test_replicas_offer_each_gpu_n_times(run_plugin: PluginFactory) -> None:
    kubelet = run_plugin(replicas=(Replicas(GPU, 2),), fail_requests_greater_than_one=True).kubelet
    kubelet.wait_for("replicas", registered([GPU]))
    ids = [d.ID for d in kubelet.devices(GPU)]
    assert ids == [f"{uuid}::{n}" for uuid in WHOLE for n in range(2)]
    answer = kubelet.allocate_ids(GPU, [f"{WHOLE[4]}::1"])
    assert [d.name for d in answer.cdi_devices] == [f"nvidia.com/gpu={WHOLE[4]}"]
    # Spread over GPUs: two replicas of two GPUs, not both of one.
    picked = kubelet.preferred(GPU, ids, [], 2)
    assert len({p.split("::")[0] for p in picked}) == 2
    import grpc

    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate_ids(GPU, [f"{WHOLE[0]}::0", f"{WHOLE[1]}::0"])
    assert "at most 1 per container" in str(refused.value.details())
