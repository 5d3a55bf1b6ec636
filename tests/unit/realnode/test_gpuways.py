"""realnode/gpuways.py: a GPU container's row skips, naming what it lacks, before it spends a timeout;
the node runtime's spec is injected by the runtime's own cdictk."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from realnode.checkstate import NodeRuntime, State
from realnode.gpuways import gpu_way, injected, injector, runtime_ways
from realnode.nodefacts import Roots
from realnode.recorder import Recorder, Row, StepSkipped


def test_a_way_without_cdictk_or_a_runc_that_runs_skips(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    state = State(str(tmp_path))
    with pytest.raises(StepSkipped, match="needs cdictk installed"):
        injected(recorder, state, "cdictk", ["/bin/true"])
    with pytest.raises(StepSkipped, match="needs the image and a runc that runs"):
        gpu_way(Row("GPU container", "", 0.0, ""), state, "GPU 0", {"root": {"path": "/"}})


def test_the_node_runtimes_spec_is_injected_by_its_own_cdictk(tmp_path: Path) -> None:
    state = State(str(tmp_path))
    with pytest.raises(StepSkipped, match="needs the node runtime"):
        injector(state, "runtime")
    state.runtime = NodeRuntime("/w/opt-cdictk", "5837c45dca602371", 1, 1)
    assert injector(state, "runtime") == "/w/opt-cdictk/bin/cdictk"
    with pytest.raises(StepSkipped, match="needs cdictk installed"):
        injector(state, "cdictk")  # the others need the venv still


def test_the_node_runtimes_four_rows_skip_without_it(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    runtime_ways(recorder, argparse.Namespace(expect_smi="fake"), Roots(), State(str(tmp_path)))
    assert [(row.name, row.status, row.detail) for row in recorder.rows] == [
        (f"node runtime: {way}", "skip", "needs the node runtime and its spec")
        for way in (
            "spec + hook, injected",
            "cdictk-runtime, env request",
            "cdictk-runtime, annotation",
            "legacy prestart hook",
        )
    ]
