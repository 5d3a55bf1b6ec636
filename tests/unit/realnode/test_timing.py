"""realnode/timing.py: the interleaved start times, their arithmetic, the node runtime's row, and the burst."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from realnode import timing
from realnode.checkstate import NodeRuntime, State
from realnode.recorder import Recorder, Result, Row, StepFailed
from realnode.timing import added, bare_starts, burst, describe, interleaved, ratio, runtime_timing

NONE, OURS, THEIRS = "no GPU", "cdictk's spec + hook", "NVIDIA's spec + hooks"
NAMES = {NONE: "no GPU", OURS: "cdictk", THEIRS: "NVIDIA"}


class FakeContainers:
    """Starts nothing: each run takes the next time its config's program is given, and says so."""

    def __init__(self, times: dict[str, list[float]], fail: set[int] | None = None) -> None:
        self.times = {program: list(values) for program, values in times.items()}
        self.fail = fail or set()
        self.order: list[str] = []
        self.roots: list[str] = []
        self.deleted: list[str] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()
        self.on_run: Callable[[], None] = lambda: None

    def bundle(self, label: str, config_for: Callable[[str], dict[str, Any]]) -> tuple[str, str]:
        container = f"{label}-{len(self.roots)}"
        rootfs = f"/checkdir/bundles/{container}/rootfs"
        self.roots.append(rootfs)
        config = config_for(rootfs)
        assert config["root"]["path"] == rootfs
        return config["process"]["args"][0], container

    def run(self, bundle: str, container: str, *, timeout: float, delete: bool = True) -> Result:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            number = len(self.order)
            self.order.append(bundle)
            ms = self.times[bundle].pop(0) if self.times.get(bundle) else 1.0
        self.on_run()
        time.sleep(0.01 if container.startswith("burst") else 0)
        with self.lock:
            self.running -= 1
        if delete:
            self.deleted.append(container)
        if number in self.fail:
            return Result([bundle], 1, "", "runc: error mounting libcuda", ms)
        return Result([bundle], 0, "", "", ms)

    def delete(self, container: str) -> None:
        self.deleted.append(container)


def config(program: str) -> dict[str, Any]:
    return {"process": {"args": [program]}, "root": {"path": "/nonexistent"}}


CONFIGS = {NONE: config("none"), OURS: config("ours"), THEIRS: config("theirs")}


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    return Recorder(str(tmp_path), "report.json", "check.log", 600)


def test_each_round_starts_every_variant_once_and_the_first_round_only_warms_up(recorder: Recorder) -> None:
    times = {"none": [500.0, 10, 11, 12], "ours": [900.0, 20, 21, 22], "theirs": [900.0, 30, 31, 32]}
    containers = FakeContainers(times)
    row = Row("t", "pass", 0, "")
    samples = interleaved(recorder, row, containers, CONFIGS, 3)  # type: ignore[arg-type]
    assert samples == {NONE: [10, 11, 12], OURS: [20, 21, 22], THEIRS: [30, 31, 32]}
    assert len(containers.order) == 12
    assert len(set(containers.roots)) == 12  # a fresh rootfs for every start
    assert "stopped_early" not in row.data


def test_the_variant_that_starts_a_round_turns_round_by_round(recorder: Recorder) -> None:
    containers = FakeContainers({})
    interleaved(recorder, Row("t", "pass", 0, ""), containers, CONFIGS, 5)  # type: ignore[arg-type]
    firsts = [containers.order[i] for i in range(0, len(containers.order), 3)]
    assert firsts == ["none", "ours", "theirs", "none", "ours", "theirs"]
    for start in range(0, len(containers.order), 3):
        assert sorted(containers.order[start : start + 3]) == ["none", "ours", "theirs"]


def test_the_rounds_stop_early_when_the_budget_runs_short_and_the_row_says_so(recorder: Recorder) -> None:
    containers = FakeContainers({})
    rounds_run = []

    def spend() -> None:
        rounds_run.append(1)
        if len(rounds_run) == 9:  # the third start of round 2: what is left is under the reserve
            recorder.deadline = time.monotonic() + timing.RESERVE - 1

    containers.on_run = spend
    row = Row("t", "pass", 0, "")
    samples = interleaved(recorder, row, containers, CONFIGS, 25)  # type: ignore[arg-type]
    assert {label: len(times) for label, times in samples.items()} == {NONE: 2, OURS: 2, THEIRS: 2}
    assert row.data["stopped_early"].startswith("after 2 of 25 rounds: ")
    assert describe(added(samples, NONE), NONE, NAMES, 25).endswith(
        "; stopped after 2 of 25 rounds (budget); under 20 rounds: a first look, not a figure to quote"
    )


def test_a_start_that_fails_fails_the_row_naming_the_variant_and_round(recorder: Recorder) -> None:
    containers = FakeContainers({}, fail={3})  # round 1 starts with cdictk's
    row = Row("t", "pass", 0, "")
    with pytest.raises(
        StepFailed, match=r"^cdictk's spec \+ hook, round 1: ours: exit 1: runc: error mounting"
    ):
        interleaved(recorder, row, containers, CONFIGS, 3)  # type: ignore[arg-type]
    assert "error mounting libcuda" in row.tail


def test_added_is_each_median_over_the_base_median() -> None:
    samples = {NONE: [40.0, 42, 41, 90, 43], OURS: [52.0, 50, 51, 53, 200], THEIRS: [70.0, 75, 72, 71, 73]}
    figures = added(samples, NONE)
    assert figures[NONE] == {
        "median_ms": 42,
        "best_ms": 40,
        "p25_ms": 40.5,
        "p75_ms": 66.5,
        "added_ms": 0,
        "rounds": 5,
    }
    assert figures[OURS]["median_ms"] == 52 and figures[OURS]["added_ms"] == 10
    assert figures[THEIRS]["added_ms"] == 30 and figures[THEIRS]["best_ms"] == 70
    assert ratio(figures, OURS, THEIRS) == 0.33


def test_one_round_has_its_one_time_for_every_figure() -> None:
    figures = added({NONE: [40.0], OURS: [45.5]}, NONE)
    assert figures[OURS] == {
        "median_ms": 45.5,
        "best_ms": 45.5,
        "p25_ms": 45.5,
        "p75_ms": 45.5,
        "added_ms": 5.5,
        "rounds": 1,
    }


def test_no_ratio_over_nothing_added_or_a_missing_variant() -> None:
    figures = added({NONE: [40.0, 41], OURS: [45.0, 46], THEIRS: [39.0, 40]}, NONE)
    assert figures[THEIRS]["added_ms"] == -1
    assert ratio(figures, OURS, THEIRS) is None
    assert ratio(added({NONE: [40.0], OURS: [45.0]}, NONE), OURS, THEIRS) is None


def test_the_row_gives_the_base_its_spread_what_each_adds_and_the_ratio() -> None:
    samples = {
        NONE: [40.0 + i % 3 for i in range(25)],
        OURS: [50.0 + i % 3 for i in range(25)],
        THEIRS: [70.0 + i % 3 for i in range(25)],
    }
    assert describe(added(samples, NONE), NONE, NAMES, 25) == (
        "medians of 25 rounds: no GPU 41.0 ms (quartiles 2.0 ms apart), cdictk +10.0 ms, "
        "NVIDIA +30.0 ms, cdictk/NVIDIA 0.33"
    )
    without = {NONE: samples[NONE][:3], OURS: samples[OURS][:3]}
    assert describe(added(without, NONE), NONE, NAMES, 3) == (
        "medians of 3 rounds: no GPU 41.0 ms (quartiles 2.0 ms apart), cdictk +10.0 ms; "
        "under 20 rounds: a first look, not a figure to quote"
    )


def test_the_burst_runs_so_many_at_a_time_and_deletes_them_after_the_clock_stops(recorder: Recorder) -> None:
    containers = FakeContainers({"probe": [float(ms) for ms in range(100, 116)]})
    row = Row("burst", "pass", 0, "")
    summary = burst(recorder, row, containers, config("probe"), total=16, parallel=4)  # type: ignore[arg-type]
    assert containers.most == 4
    assert sorted(containers.deleted) == sorted(f"burst-{i}" for i in range(16))
    assert {key: summary[key] for key in ("containers", "parallel", "failed", "median_ms", "max_ms")} == {
        "containers": 16,
        "parallel": 4,
        "failed": 0,
        "median_ms": 107.5,
        "max_ms": 115,
    }
    assert 0.04 <= summary["total_s"] < 5  # four waves of 10 ms
    assert row.detail.startswith("16/16 started and passed, 4 at a time, ")
    assert row.data["failed"] == 0


def test_a_burst_with_failures_fails_the_row_with_the_first_one(recorder: Recorder) -> None:
    containers = FakeContainers({}, fail={2, 5})
    row = Row("burst", "pass", 0, "")
    with pytest.raises(
        StepFailed, match=r"^2 of 8 failed \(probe: exit 1: runc: error mounting libcuda\); 6/8"
    ):
        burst(recorder, row, containers, config("probe"), total=8, parallel=2)  # type: ignore[arg-type]
    assert row.data["failed"] == 2 and "libcuda" in row.tail
    assert len(containers.deleted) == 8


def test_a_bare_start_is_each_pythons_whole_run_in_turn(recorder: Recorder) -> None:
    found = bare_starts(recorder, {"node runtime": sys.executable, "node's Python": sys.executable}, 2)
    assert set(found) == {"node runtime", "node's Python"} and all(ms > 0 for ms in found.values())
    log = Path(recorder.log.name).read_text(encoding="utf-8")
    assert log.count(f"$ {sys.executable} -I -S -c pass") == 6  # a round to warm up, then 2
    with pytest.raises(StepFailed, match=r"^node runtime: python3: exit 127"):
        bare_starts(recorder, {"node runtime": "/nonexistent/bin/python3"}, 1)


def test_the_node_runtimes_row_puts_its_hook_beside_the_node_pythons_with_its_size(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = argparse.Namespace(rounds=1)
    state = State(str(tmp_path))
    runtime_timing(recorder, args, state)
    assert recorder.rows[-1].detail == "needs the image and a runc that runs"
    state.containers, state.runs = FakeContainers({}), True  # type: ignore[assignment]
    runtime_timing(recorder, args, state)
    assert recorder.rows[-1].detail == "needs the node runtime and its spec"

    state.runtime = NodeRuntime("/w/opt-cdictk", "5837c45dca602371", 39 << 20, 1394)
    state.loaded = {"runtime": {}, "cdictk": {}}
    runs = {"/bin/true": [50.0, 50.0], "runtime": [90.0, 90.0], "cdictk": [99.0, 100.0]}
    state.containers = FakeContainers(runs)  # type: ignore[assignment]
    monkeypatch.setattr(timing, "injected", lambda recorder, state, spec, args: config(spec))
    monkeypatch.setattr(timing, "bare_starts", lambda recorder, pythons, rounds: dict.fromkeys(pythons, 15.0))
    runtime_timing(recorder, args, state)
    row = recorder.rows[-1]
    assert (row.name, row.status) == ("node runtime: start time, 1 rounds", "pass")
    assert row.detail == (
        "medians of 1 rounds: no GPU 50.0 ms (quartiles 0.0 ms apart), node runtime +40.0 ms, "
        "node's Python +50.0 ms, node runtime/node's Python 0.80; under 20 rounds: a first look, not a "
        "figure to quote; bare start (-I -S -c pass): node runtime 15.0 ms, node's Python 15.0 ms; "
        "39.0 MiB on the node"
    )
    figures = recorder.sections["node_runtime"]["timing"]
    assert figures["ratio_runtime_over_python"] == {"added": 0.8}
    assert figures["size"] == {"bytes": 39 << 20, "files": 1394}
