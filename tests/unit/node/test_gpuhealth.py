"""HealthMonitor's rules, fed the NVML child's messages directly with a clock of the test's own; then
the child's life (restarted when it dies, every device in doubt meanwhile) with stand-in jobs in the NVML runner's child."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from cdictk.node.gpuhealth import (
    IGNORED_XIDS,
    LOST,
    UNMONITORED,
    XID,
    Finding,
    HealthMonitor,
    HealthPolicy,
    Watched,
)
from cdictk.node.nvmlchild import Job, Send

GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
GPU_M = "GPU-cccccccc-0000-0000-0000-000000000003"  # in MIG mode: offered as its two MIG devices
MIG_1 = "MIG-11111111-0000-0000-0000-000000000001"
MIG_2 = "MIG-22222222-0000-0000-0000-000000000002"
DEVICES = (
    Watched(GPU_A, GPU_A),
    Watched(GPU_B, GPU_B),
    Watched(MIG_1, GPU_M, gi=1, ci=0),
    Watched(MIG_2, GPU_M, gi=2, ci=0),
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Monitor:
    """A HealthMonitor on DEVICES with a settable clock; counts on_change calls and keeps log lines."""

    def __init__(self, **health: object) -> None:
        self.clock = Clock()
        self.changes = 0
        self.lines: list[str] = []
        settings = dataclasses.replace(HealthPolicy(), **health)  # type: ignore[arg-type]
        self.monitor = HealthMonitor(settings, self._changed, clock=self.clock, log=self.lines.append)
        self.monitor.watch(DEVICES)
        self.changes = 0

    def _changed(self) -> None:
        self.changes += 1

    def feed(self, **message: object) -> dict[str, str]:
        self.monitor.feed(dict(message))
        return self.monitor.unhealthy()


def test_every_device_is_healthy_until_told_otherwise() -> None:
    m = Monitor()
    assert m.monitor.unhealthy() == {}
    assert m.monitor.links() == {}
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""}) == {}
    assert m.changes == 0  # nothing changed: the kubelet is not sent the same list again
    assert m.monitor.probes == 1


def test_a_lost_gpu_is_unhealthy_with_its_mig_devices_until_nvml_answers_again() -> None:
    m = Monitor()
    assert m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: ""}) == {GPU_A: "GPU is lost"}
    assert m.changes == 1
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: "GPU is lost"}) == {
        MIG_1: "GPU is lost",
        MIG_2: "GPU is lost",
    }
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""}) == {}
    assert m.changes == 3


def test_a_fatal_xid_makes_the_gpu_unhealthy() -> None:
    m = Monitor()
    assert m.feed(xid=79, uuid=GPU_B, gi=None, ci=None) == {GPU_B: "Xid 79"}
    assert m.changes == 1
    assert m.lines == [f"Xid 79 on {GPU_B}", f"{GPU_B} unhealthy: Xid 79"]


def test_findings_say_each_devices_trouble_as_xid_lost_or_unmonitored() -> None:
    """What the DRA plugin taints by: the cause beside the words the device plugin's log says."""
    m = Monitor()
    m.feed(xid=79, uuid=GPU_M, gi=2, ci=0)
    m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: ""})
    assert m.monitor.findings() == {
        MIG_2: Finding(XID, "Xid 79", 79),
        GPU_A: Finding(LOST, "GPU is lost"),
    }
    m.monitor.watch(DEVICES, {GPU_B: "not found by the last discovery"})
    assert m.monitor.findings()[GPU_B] == Finding(LOST, "not found by the last discovery")
    m.feed(error="waiting for NVML events failed: Unknown Error")
    assert set(m.monitor.findings().values()) == {
        Finding(UNMONITORED, "waiting for NVML events failed: Unknown Error")
    }
    assert len(m.monitor.findings()) == len(DEVICES)


def test_each_change_of_health_is_one_line() -> None:
    m = Monitor()
    m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: "GPU is lost"})
    m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: "GPU is lost"})  # no change: no line
    m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: "Unknown Error"})
    m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""})
    assert m.lines == [
        f"{GPU_A}, {MIG_1}, {MIG_2} unhealthy: GPU is lost",
        f"{MIG_1}, {MIG_2} unhealthy: Unknown Error",  # unhealthy still, for another reason
        f"{GPU_A} healthy again",
        f"{MIG_1}, {MIG_2} healthy again",
    ]
    assert m.changes == 3


def test_the_end_of_each_recovery_period_is_one_line() -> None:
    m = Monitor(xid_recovery=300.0)
    m.feed(xid=79, uuid=GPU_A, gi=None, ci=None)
    m.feed(xid=94, uuid=GPU_M, gi=2, ci=0)
    m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: ""})  # lost as well: unhealthy after its recovery
    m.lines.clear()
    m.clock.now += 300.0
    m.monitor.tick()
    assert m.lines == [
        f"Xid 79 on {GPU_A}: 300 s without another, its recovery is over",
        f"Xid 94 on {GPU_M} GI 2 CI 0: 300 s without another, its recovery is over",
        f"{MIG_2} healthy again",
    ]
    m.lines.clear()
    m.monitor.tick()
    assert m.lines == []  # said once
    m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""})
    assert m.lines == [f"{GPU_A} healthy again"]


def test_without_nvml_events_the_probes_vouch_for_the_gpus() -> None:
    m = Monitor()
    m.feed(probing="NVML has no events (Not Supported)")
    assert m.lines == ["NVML has no events (Not Supported): health from probes alone, no Xids"]
    assert m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: ""}) == {GPU_A: "GPU is lost"}
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""}) == {}
    assert m.lines[1:] == [f"{GPU_A} unhealthy: GPU is lost", f"{GPU_A} healthy again"]


def test_an_xid_on_a_whole_gpu_in_mig_mode_makes_every_mig_device_unhealthy() -> None:
    m = Monitor()
    assert m.feed(xid=48, uuid=GPU_M, gi=None, ci=None) == {MIG_1: "Xid 48", MIG_2: "Xid 48"}


def test_an_xid_naming_a_mig_instance_makes_that_mig_device_alone_unhealthy() -> None:
    m = Monitor()
    assert m.feed(xid=94, uuid=GPU_M, gi=2, ci=0) == {MIG_2: "Xid 94"}
    # another compute instance of the same GPU instance is another device: none offered here
    assert m.feed(xid=94, uuid=GPU_M, gi=1, ci=5) == {MIG_2: "Xid 94"}


@pytest.mark.parametrize(("gi", "ci"), [(2, None), (None, 0)])
def test_an_xid_naming_one_instance_but_not_both_is_the_whole_gpus(gi: int | None, ci: int | None) -> None:
    """NVIDIA's plugin matches a MIG device only when the event names both instances."""
    m = Monitor()
    assert m.feed(xid=94, uuid=GPU_M, gi=gi, ci=ci) == {MIG_1: "Xid 94", MIG_2: "Xid 94"}


@pytest.mark.parametrize("xid", IGNORED_XIDS)
def test_application_xids_are_ignored(xid: int) -> None:
    m = Monitor()
    assert m.feed(xid=xid, uuid=GPU_A, gi=None, ci=None) == {}
    assert m.changes == 0
    assert any(f"Xid {xid} on {GPU_A}: an application error" in line for line in m.lines)


def test_the_ignored_list_is_the_settings_own() -> None:
    m = Monitor(ignored_xids=(79,))
    assert m.feed(xid=79, uuid=GPU_A, gi=None, ci=None) == {}
    assert m.feed(xid=13, uuid=GPU_A, gi=None, ci=None) == {GPU_A: "Xid 13"}  # no longer in the list


def test_an_xid_recovers_after_xid_recovery_seconds_without_another() -> None:
    m = Monitor(xid_recovery=300.0)
    m.feed(xid=79, uuid=GPU_A, gi=None, ci=None)
    m.clock.now += 299.0
    m.monitor.tick()
    assert m.monitor.unhealthy() == {GPU_A: "Xid 79"}
    assert m.changes == 1
    # another Xid restarts the wait
    m.feed(xid=62, uuid=GPU_A, gi=None, ci=None)
    m.clock.now += 299.0
    m.monitor.tick()
    assert m.monitor.unhealthy() == {GPU_A: "Xid 62"}
    m.clock.now += 1.0
    m.monitor.tick()  # the plugin's look: the recovery time came, the list goes out again
    assert m.monitor.unhealthy() == {}
    assert m.changes == 3


def test_a_recovered_xid_stays_unhealthy_while_nvml_has_lost_the_gpu() -> None:
    m = Monitor(xid_recovery=10.0)
    m.feed(xid=79, uuid=GPU_A, gi=None, ci=None)
    m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: ""})
    m.clock.now += 60.0
    assert m.monitor.unhealthy() == {GPU_A: "GPU is lost"}
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""}) == {}


def test_never_recovering_is_nvidias_behaviour() -> None:
    m = Monitor(xid_recovery=None)
    m.feed(xid=79, uuid=GPU_A, gi=None, ci=None)
    m.clock.now += 10**9
    m.monitor.tick()
    assert m.monitor.unhealthy() == {GPU_A: "Xid 79"}


def test_while_the_event_wait_fails_every_device_stays_unhealthy_until_it_works() -> None:
    m = Monitor()
    why = "waiting for NVML events failed: Unknown Error"
    everything = {device.uuid: why for device in DEVICES}
    assert m.feed(error=why) == everything
    # probes that find every GPU do not vouch for them (events still cannot be had): no flapping,
    # and the kubelet is sent one list, not one per probe
    for _ in range(3):
        assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""}) == everything
        assert m.feed(error=why) == everything
    assert m.changes == 1
    assert [line for line in m.lines if why in line] == [f"all 4 devices unhealthy: {why}"]
    # a wait that works does
    assert m.feed(watching=True) == {}
    assert m.changes == 2
    assert m.lines[-1] == "all 4 devices healthy again"


def test_an_xid_on_a_gpu_nvml_cannot_name_makes_every_gpu_unhealthy() -> None:
    m = Monitor(xid_recovery=10.0)
    assert m.feed(xid=79, uuid=None, gi=None, ci=None, why="Unknown Error") == {
        device.uuid: "Xid 79" for device in DEVICES
    }
    assert any("a GPU NVML cannot name (Unknown Error)" in line for line in m.lines)
    m.clock.now += 10.0
    m.monitor.tick()
    assert m.monitor.unhealthy() == {}
    assert m.feed(xid=13, uuid=None, gi=None, ci=None, why="Unknown Error") == {}


def test_with_health_checks_off_every_device_is_healthy() -> None:
    m = Monitor(enabled=False)
    # the topology-only child failing to load NVML, a GPU discovery no longer finds, a lost GPU, an Xid
    assert m.feed(error="NVML at /lib/libnvidia-ml.so.1: cannot load") == {}
    m.monitor.watch(DEVICES, absent={GPU_A: "not found by the last discovery"})
    assert m.monitor.unhealthy() == {}
    assert m.feed(probe={GPU_A: "GPU is lost", GPU_B: "", GPU_M: ""}) == {}
    assert m.feed(xid=79, uuid=GPU_B, gi=None, ci=None) == {}
    assert m.changes == 0


def test_links_are_kept_by_pair() -> None:
    m = Monitor()
    m.feed(links=[[GPU_A, GPU_B, 450], [GPU_A, GPU_M, 20]])
    assert m.monitor.links() == {frozenset((GPU_A, GPU_B)): 450, frozenset((GPU_A, GPU_M)): 20}
    assert m.changes == 0


def test_watch_forgets_gpus_no_longer_there_and_reports_the_new_list() -> None:
    m = Monitor()
    m.feed(probe={GPU_A: "", GPU_B: "GPU is lost", GPU_M: ""})
    m.feed(xid=79, uuid=GPU_A, gi=None, ci=None)
    m.monitor.watch(DEVICES[2:])  # GPUs A and B gone from discovery (a driver reload, a new node)
    assert m.monitor.unhealthy() == {}
    m.monitor.watch(DEVICES)  # back: what was known of them is gone, not brought back
    assert m.monitor.unhealthy() == {}


def test_gpus_discovery_misses_are_unhealthy_until_nvml_answers_for_them() -> None:
    m = Monitor()
    m.monitor.watch(DEVICES, absent={GPU_M: "not found by the last discovery"})
    assert m.monitor.unhealthy() == {
        MIG_1: "not found by the last discovery",
        MIG_2: "not found by the last discovery",
    }
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: "GPU is lost"}) == {
        MIG_1: "GPU is lost",
        MIG_2: "GPU is lost",
    }
    assert m.feed(probe={GPU_A: "", GPU_B: "", GPU_M: ""}) == {}
    # a discovery that finds it again clears it too (health checks off: no probes)
    m.monitor.watch(DEVICES, absent={GPU_A: "gone"})
    assert m.monitor.unhealthy() == {GPU_A: "gone"}
    m.monitor.watch(DEVICES)
    assert m.monitor.unhealthy() == {}


# ---- the child ---------------------------------------------------------------------------------

# A library the runner may load (root's, as libc is): the stand-in jobs below ask it nothing.
LIBRARY = next(
    line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/libc.so" in line
)


def record(runs: Path, argument: object) -> int:
    """Append the job's argument to ``runs``: how many runs there were."""
    with runs.open("a") as file:
        file.write(json.dumps(argument) + "\n")
    return len(runs.read_text().splitlines())


def restarting(runs: Path) -> Job:
    """The first run reports GPU-x lost and exits 3, the second reports it answering, its event wait
    working, and stays."""

    def job(_nvml: object, argument: object, send: Send) -> None:
        count = record(runs, argument)
        send({"links": [["a", "b", 100]]})
        send({"probe": {"GPU-x": "GPU is lost" if count == 1 else ""}})
        if count == 1:
            os._exit(3)
        send({"watching": True})
        time.sleep(60)

    return job


def wait_until(what: str, predicate: object, timeout: float = 20.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def child_monitor(tmp_path: Path, lines: list[str], **health: object) -> tuple[HealthMonitor, Path]:
    """A monitor running the stand-in :func:`restarting`, which logs its arguments to the returned file."""
    runs = tmp_path / "runs"
    settings = dataclasses.replace(HealthPolicy(probe_interval=0.05), **health)  # type: ignore[arg-type]
    monitor = HealthMonitor(settings, log=lines.append)
    monitor.watch([Watched("GPU-x", "GPU-x"), Watched("GPU-y", "GPU-y")])
    monitor.start(LIBRARY, restarting(runs))
    return monitor, runs


def argvs(runs: Path) -> list[dict[str, Any]]:
    """The arguments each run of the stand-in job was given."""
    return [json.loads(line) for line in runs.read_text().splitlines()] if runs.exists() else []


def test_the_child_is_run_with_the_watched_gpus_and_restarted_when_it_dies(tmp_path: Path) -> None:
    lines: list[str] = []
    monitor, runs = child_monitor(tmp_path, lines)
    try:
        wait_until("the second child", lambda: len(argvs(runs)) == 2 and monitor.probes >= 2)
        wait_until("every device healthy once the second child watches", lambda: monitor.unhealthy() == {})
        assert argvs(runs) == [{"uuids": ["GPU-x", "GPU-y"], "interval": 0.05, "events": True}] * 2
        assert lines == [
            "GPU-x unhealthy: GPU is lost",
            "all 2 devices unhealthy: the NVML watcher ended (exit status 3); restarting it",
            "all 2 devices healthy again",
        ]
        assert monitor.links() == {frozenset(("a", "b")): 100}
    finally:
        monitor.stop()
    assert len(argvs(runs)) == 2


def test_without_health_checks_the_child_only_reports_topology_and_is_not_restarted(tmp_path: Path) -> None:
    lines: list[str] = []
    monitor, runs = child_monitor(tmp_path, lines, enabled=False)
    try:
        thread = monitor._thread
        assert thread is not None
        thread.join(timeout=20)
        assert not thread.is_alive()
        assert argvs(runs) == [{"uuids": ["GPU-x", "GPU-y"], "interval": 0.05, "events": False}]
        assert lines == []
        assert monitor.links() == {frozenset(("a", "b")): 100}
    finally:
        monitor.stop()


def stays(runs: Path) -> Job:
    def job(_nvml: object, argument: object, send: Send) -> None:
        record(runs, argument)
        send({"watching": True})
        time.sleep(60)

    return job


def test_the_child_is_run_again_when_the_set_of_gpus_changes(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    lines: list[str] = []
    monitor = HealthMonitor(HealthPolicy(probe_interval=0.05), log=lines.append)
    monitor.watch([Watched("GPU-x", "GPU-x"), Watched("GPU-y", "GPU-y")])
    monitor.start(LIBRARY, stays(runs))
    try:
        wait_until("the first child", lambda: len(argvs(runs)) == 1)
        # new MIG devices on the same GPUs: the child watches GPUs, nothing to do
        monitor.watch([Watched("MIG-1", "GPU-x", 1, 0), Watched("GPU-y", "GPU-y")])
        # a GPU found by a rediscovery (a driver reload, a GPU back on the bus)
        monitor.watch([Watched("MIG-1", "GPU-x", 1, 0), Watched("GPU-y", "GPU-y"), Watched("GPU-z", "GPU-z")])
        wait_until("the second child", lambda: len(argvs(runs)) == 2)
        assert argvs(runs)[1]["uuids"] == ["GPU-x", "GPU-y", "GPU-z"]
        assert lines == ["the GPUs changed; watching 3 with NVML afresh"]
    finally:
        monitor.stop()
    assert len(argvs(runs)) == 2


def slow_topology(says: str) -> Job:
    def job(_nvml: object, _argument: object, send: Send) -> None:
        time.sleep(0.5)
        if says == "links":
            send({"links": [["GPU-x", "GPU-y", 460]]})
            time.sleep(60)

    return job


@pytest.mark.parametrize("says", ["links", "nothing"])
def test_asking_for_the_topology_waits_for_the_child_to_say_it_or_to_end(tmp_path: Path, says: str) -> None:
    """What the first preferred allocation after registering asks, before the child has said."""
    monitor = HealthMonitor(HealthPolicy(enabled=False))
    monitor.watch([Watched("GPU-x", "GPU-x"), Watched("GPU-y", "GPU-y")])
    assert monitor.links() == {}  # no child yet: nothing to wait for
    monitor.start(LIBRARY, slow_topology(says))
    try:
        expected = {frozenset(("GPU-x", "GPU-y")): 460} if says == "links" else {}
        assert monitor.links() == expected
    finally:
        monitor.stop()
