"""The NVML child's questions, asked of a stand-in with pynvml's names (topology scores, probes), and
the child itself on the fake eight-GPU node's NVML: the links it reports, then Xid events and probes;
and which NVML it loads, in the plugin too: never a user's library, whose constructor would run as root."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from cdictk.node import nvmlwatch
from cdictk.node.nvmlchild import NvmlChild
from cdictk.node.nvmlwatch import NO_INSTANCE, NVLINK_SCORE, PCIE_SCORES, links, pair_score, probe
from tests.conftest import NodeFactory
from tests.e2e.kubelet.kubelet import Kubelet
from tests.fakenode.planted import USER, plant, ran, relist, user_lib_dir
from tests.unit.deviceplugin.conftest import GPU, generate_spec


class NVMLError(Exception):
    pass


class Handle:
    def __init__(self, uuid: str, bus: str | bytes) -> None:  # pynvml answers either
        self.uuid, self.bus = uuid, bus


class FakeNvml:
    """pynvml's calls the child makes, on GPUs given as (uuid, bus, PCIe level to the others, NVLinks)."""

    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 4

    def __init__(self, levels: dict[frozenset[str], int], nvlinks: dict[str, list[str | None]]) -> None:
        self.handles = {
            f"GPU-{n}": Handle(f"GPU-{n}", f"00000000:0{n}:00.0".encode() if n % 2 else f"00000000:0{n}:00.0")
            for n in range(4)
        }
        self.levels, self.nvlinks = levels, nvlinks
        self.lost: set[str] = set()

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        if uuid in self.lost or uuid not in self.handles:
            raise NVMLError("GPU is lost" if uuid in self.lost else "Not Found")
        return self.handles[uuid]

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        return type("Pci", (), {"busId": handle.bus})()

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Handle, b: Handle) -> int:
        level = self.levels.get(frozenset((a.uuid, b.uuid)))
        if level is None:
            raise NVMLError("Not Supported")
        return level

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        peers = self.nvlinks.get(handle.uuid, [])
        if link >= len(peers):
            raise NVMLError("Not Supported")
        return 1 if peers[link] is not None else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Handle, link: int) -> Any:
        peer = self.nvlinks[handle.uuid][link]
        assert peer is not None
        return type("Pci", (), {"busId": self.handles[peer].bus})()


def test_pair_score_is_pcie_closeness_plus_100_per_nvlink() -> None:
    nvml = FakeNvml(
        {frozenset(("GPU-0", "GPU-1")): 10, frozenset(("GPU-0", "GPU-2")): 50},
        {"GPU-0": ["GPU-1", None, "GPU-1", "GPU-3"]},  # two links to GPU 1, one to 3, one down
    )
    h = nvml.handles
    assert pair_score(nvml, h["GPU-0"], h["GPU-1"], "00000000:01:00.0") == PCIE_SCORES[10] + 2 * NVLINK_SCORE
    assert pair_score(nvml, h["GPU-0"], h["GPU-2"], "00000000:02:00.0") == PCIE_SCORES[50]
    # topology unknown: NVLinks alone; bus IDs compared without case
    assert pair_score(nvml, h["GPU-0"], h["GPU-3"], "00000000:03:00.0".upper()) == NVLINK_SCORE
    assert pair_score(nvml, h["GPU-2"], h["GPU-3"], "00000000:03:00.0") == 0


def test_links_pairs_every_gpu_nvml_finds() -> None:
    nvml = FakeNvml({frozenset(("GPU-0", "GPU-1")): 10}, {})
    nvml.lost.add("GPU-2")
    assert links(nvml, ["GPU-0", "GPU-1", "GPU-2", "GPU-9"]) == [["GPU-0", "GPU-1", PCIE_SCORES[10]]]


def test_probe_says_why_a_gpu_is_not_found() -> None:
    nvml = FakeNvml({}, {})
    nvml.lost.add("GPU-1")
    assert probe(nvml, ["GPU-0", "GPU-1"]) == {"GPU-0": "", "GPU-1": "GPU is lost"}


class Stop(Exception):
    pass


class Event:
    def __init__(self, device: Handle, xid: int, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> None:
        self.device, self.eventType, self.eventData = device, 8, xid
        self.gpuInstanceId, self.computeInstanceId = gi, ci


class WaitingNvml(FakeNvml):
    """FakeNvml with an event set whose waits answer from a script: an Event, "timeout", or another
    failure's text; then Stop, which ends watch()."""

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, script: list[object]) -> None:
        super().__init__({}, {})
        self.script = script

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceGetSupportedEventTypes(self, handle: Handle) -> int:
        return 0xFF

    def nvmlDeviceRegisterEvents(self, handle: Handle, types: int, events: object) -> None:
        pass

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        if handle.uuid == "GPU-3":
            raise NVMLError("Unknown Error")
        return handle.uuid

    def nvmlEventSetWait_v2(self, events: object, timeout_ms: int) -> Event:
        if not self.script:
            raise Stop
        step = self.script.pop(0)
        if isinstance(step, Event):
            return step
        error = NVMLError("Timeout" if step == "timeout" else step)
        error.value = self.NVML_ERROR_TIMEOUT if step == "timeout" else 999  # type: ignore[attr-defined]
        raise error


def watched(script: list[object]) -> list[dict[str, Any]]:
    heard: list[dict[str, Any]] = []
    with pytest.raises(Stop):
        nvmlwatch.watch(WaitingNvml(script), ["GPU-0", "GPU-1"], 0.001, heard.append)
    return heard


def test_a_failing_event_wait_is_said_once_and_its_recovery_once() -> None:
    heard = [
        m for m in watched(["timeout", "lost", "lost", "lost", "timeout", "timeout"]) if "probe" not in m
    ]
    assert heard == [
        {"watching": True},
        {"error": "waiting for NVML events failed: lost"},
        {"watching": True},
    ]
    heard = [m for m in watched(["lost", "Unknown Error", "timeout"]) if "probe" not in m]
    assert heard == [
        {"error": "waiting for NVML events failed: lost"},
        {"error": "waiting for NVML events failed: Unknown Error"},
        {"watching": True},
    ]


def nvml_error(text: str, value: int) -> NVMLError:
    error = NVMLError(text)
    error.value = value  # type: ignore[attr-defined]
    return error


class EventlessNvml(WaitingNvml):
    """An NVML whose event set cannot be made (``create``) or waited on (``wait``): its error; ends
    watch() with Stop at the fourth look-up of GPU-0."""

    def __init__(self, fails: str, error: NVMLError) -> None:
        super().__init__([])
        self.fails, self.error, self.probes = fails, error, 0

    def nvmlEventSetCreate(self) -> object:
        if self.fails == "create":
            raise self.error
        return object()

    def nvmlEventSetWait_v2(self, events: object, timeout_ms: int) -> Event:
        raise self.error

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        if uuid == "GPU-0":
            self.probes += 1
            if self.probes > 3:
                raise Stop
        return super().nvmlDeviceGetHandleByUUID(uuid)


@pytest.mark.parametrize(
    ("fails", "error", "said"),
    [
        ("create", nvml_error("Not Supported", 3), "NVML has no events (Not Supported)"),
        ("wait", nvml_error("Function Not Found", 13), "NVML cannot wait for events (Function Not Found)"),
    ],
)
def test_an_nvml_without_events_is_said_once_then_probed(fails: str, error: NVMLError, said: str) -> None:
    nvml = EventlessNvml(fails, error)
    nvml.lost.add("GPU-1")
    heard: list[dict[str, Any]] = []
    with pytest.raises(Stop):
        nvmlwatch.watch(nvml, ["GPU-0", "GPU-1"], 0.001, heard.append)
    probed = {"probe": {"GPU-0": "", "GPU-1": "GPU is lost"}}
    if fails == "create":
        assert heard == [{"probing": said}, probed, probed, probed]
    else:  # the first probe comes before the first wait (and registering looked GPU-0 up once)
        assert heard == [probed, {"probing": said}, probed]


class InitlessNvml(EventlessNvml):
    def nvmlInit(self) -> None:
        raise nvml_error("Driver Not Loaded", 9)


def test_another_nvml_failure_is_the_last_message() -> None:
    heard: list[dict[str, Any]] = []
    argument = {"uuids": ["GPU-0"], "interval": 0.001, "events": True}
    nvml = EventlessNvml("create", nvml_error("Unknown Error", 999))
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvmlwatch.job(nvml, argument, heard.append)
    assert heard == [{"links": []}, {"error": "NVML events: Unknown Error"}]
    heard.clear()
    nvmlwatch.job(InitlessNvml("create", nvml_error("Unknown Error", 999)), argument, heard.append)
    assert heard == [{"error": "nvmlInit failed: Driver Not Loaded"}]


def test_the_topology_alone_without_events() -> None:
    heard: list[dict[str, Any]] = []
    nvml = WaitingNvml([])
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvmlwatch.job(nvml, {"uuids": ["GPU-0", "GPU-1"], "interval": 1, "events": False}, heard.append)
    assert heard == [{"links": [["GPU-0", "GPU-1", 0]]}]


def test_xid_events_name_their_gpu_and_instances() -> None:
    nvml = FakeNvml({}, {})
    gpu0, gpu3 = nvml.handles["GPU-0"], nvml.handles["GPU-3"]
    heard = [
        m for m in watched([Event(gpu0, 79), Event(gpu0, 94, gi=2, ci=0), Event(gpu3, 48)]) if "xid" in m
    ]
    assert heard == [
        {"xid": 79, "uuid": "GPU-0", "gi": None, "ci": None},
        {"xid": 94, "uuid": "GPU-0", "gi": 2, "ci": 0},
        {"xid": 48, "uuid": None, "gi": None, "ci": None, "why": "Unknown Error"},
    ]


def child(library: str, uuids: list[str], *, interval: float = 0.1, events: bool = True) -> NvmlChild:
    """The watcher in the runner's child, as the plugin runs it."""
    process = NvmlChild(nvmlwatch.job)
    process.ask(library, {"uuids": uuids, "interval": interval, "events": events})
    return process


def read_until(process: NvmlChild, wanted: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """The child's messages up to the first with key ``wanted``."""
    deadline = time.monotonic() + timeout
    heard: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        message = process.receive(deadline)
        assert message is not None, f"the child ended: {heard}"
        heard.append(message)
        if wanted in heard[-1]:
            return heard
    raise AssertionError(f"no {wanted} within {timeout} s: {heard}")


@pytest.mark.root
def test_the_child_on_a_fake_node_whose_nvml_has_no_events(make_node: NodeFactory) -> None:
    node = make_node("eight")
    node.write_nvml_config(dataclasses.replace(node.nvml_config(), events=False))
    library = str(Path(node.lib_dir) / "libnvidia-ml.so.1")
    uuids = [gpu.uuid for gpu in node.preset.gpus]
    process = child(library, uuids)
    try:
        heard = read_until(process, "probing")
        assert [m for m in heard if "probe" not in m][1:] == [
            {"probing": "NVML has no events (Not Supported)"}
        ]
        node.nvml_event("lost gpu=5")
        deadline = time.monotonic() + 20
        while read_until(process, "probe")[-1]["probe"][uuids[5]] == "":
            assert time.monotonic() < deadline
        process.kill()
        while process.receive() is not None:
            pass
        assert process.status == "killed by signal 9"  # it was still probing
    finally:
        process.close()


@pytest.mark.root
def test_the_child_on_the_fake_node(make_node: NodeFactory) -> None:
    node = make_node("eight")
    library = str(Path(node.lib_dir) / "libnvidia-ml.so.1")
    uuids = [gpu.uuid for gpu in node.preset.gpus]
    topology_only = child(library, uuids, events=False)
    first = topology_only.receive(time.monotonic() + 30)
    assert first is not None and topology_only.receive(time.monotonic() + 30) is None
    assert topology_only.status == "exit status 0"
    scores = {frozenset((a, b)): score for a, b, score in first["links"]}
    assert len(scores) == 28  # every pair of eight
    # GPUs 2 and 3: four NVLinks on one PCIe switch; 3 and 4: across NUMA nodes
    assert scores[frozenset(uuids[2:4])] == 4 * NVLINK_SCORE + PCIE_SCORES[10]
    assert scores[frozenset(uuids[3:5])] < scores[frozenset(uuids[1:3])]
    watching = child(library, uuids)
    try:
        assert read_until(watching, "probe")[-1]["probe"] == dict.fromkeys(uuids, "")
        node.nvml_event("xid gpu=3 xid=79")
        [xid] = [m for m in read_until(watching, "xid") if "xid" in m]
        assert xid == {"xid": 79, "uuid": uuids[3], "gi": None, "ci": None}
        node.nvml_event("lost gpu=5")
        deadline = time.monotonic() + 20
        while (probed := read_until(watching, "probe")[-1]["probe"])[uuids[5]] == "":
            assert time.monotonic() < deadline
        assert probed[uuids[5]] and all(probed[u] == "" for u in uuids if u != uuids[5])
    finally:
        watching.close()


@pytest.mark.root
def test_the_child_loads_no_library_that_is_not_roots_alone(make_node: NodeFactory, tmp_path: Path) -> None:
    """Whatever path it is given: it judges the file again where it would run it."""
    node = make_node("single")
    marker = str(tmp_path / "ran")
    planted = plant(user_lib_dir(node.root), "libnvidia-ml.so.1", marker)
    process = child(planted, [node.preset.gpus[0].uuid])
    said = process.receive(time.monotonic() + 60)
    assert process.receive(time.monotonic() + 60) is None and ran(marker) == []
    assert said == {
        "error": f"{os.path.dirname(planted)}: owned by uid {USER}, not root: not loaded "
        "(cdictk would run its code as root)",
        "absent": True,
    }


PLUGIN = [sys.executable, "-m", "cdictk", "device-plugin"]


@pytest.mark.root
def test_the_plugins_nvml_child_never_runs_a_users_library_put_in_a_listed_directory(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """ld.so.conf names a user's directory, and the user puts a libnvidia-ml.so.1 there after ldconfig
    ran. The plugin's NVML child loads the driver's (the cache's entry): the GPU it loses reaches the
    kubelet, and the planted constructor never runs. Before, the child loaded the user's file as root, at every
    restart."""
    node = make_node("single")
    marker = str(tmp_path / "ran")
    plant(user_lib_dir(node.root), "libnvidia-ml.so.1", marker)
    generate_spec(node, tmp_path / "cdi")
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-dpnvml-", dir="/tmp")  # socket paths are short
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    args = [
        "--plugin-dir", plugin_dir, "--driver-root", node.root, "--proc-root", node.proc,
        "--sys-root", node.sys, "--spec-dir", str(tmp_path / "cdi"),
    ]  # fmt: skip
    process = subprocess.Popen([*PLUGIN, *args], stderr=subprocess.PIPE, text=True)
    uuid = node.preset.gpus[0].uuid
    try:
        kubelet.wait_for("the plugin", lambda k: k.health(GPU) == {uuid: "Healthy"})
        node.nvml_event("lost gpu=0")
        kubelet.wait_for(
            "the lost GPU, through the driver's NVML", lambda k: k.health(GPU) == {uuid: "Unhealthy"}
        )
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        kubelet.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)
    assert ran(marker) == []
    assert process.returncode == 0, stderr


@pytest.mark.root
def test_the_plugin_stops_when_the_nvml_the_cache_names_is_a_users(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """ldconfig ran again since, the user's directory first: the cache names the user's file, which
    the loader would take. The plugin says why in one line and exits 1, having loaded nothing."""
    node = make_node("single")
    marker = str(tmp_path / "ran")
    planted = plant(user_lib_dir(node.root, first=True), "libnvidia-ml.so.1", marker)
    relist(node.root)
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-dpnvml-", dir="/tmp")
    try:
        args = [
            "--plugin-dir", plugin_dir, "--driver-root", node.root, "--proc-root", node.proc,
            "--sys-root", node.sys, "--no-spec-check",
        ]  # fmt: skip
        result = subprocess.run([*PLUGIN, *args], capture_output=True, text=True, timeout=60, check=False)
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)
    assert ran(marker) == []
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"cdictk: error: libnvidia-ml.so.1: {os.path.dirname(planted)}: owned by uid {USER}, not "
        "root: not loaded (cdictk would run its code as root)"
    ]
