"""realnode/baseline.py: what the GPU containers need and are measured against."""

from __future__ import annotations

from pathlib import Path

import pytest

from realnode.baseline import build_cuda, build_image, cdictk_spec, host_baseline, spec_smi
from realnode.checkstate import State
from realnode.recorder import Recorder, Row, StepSkipped


def test_the_nvidia_smi_a_spec_mounts_is_found_in_its_common_or_device_edits() -> None:
    smi = {"hostPath": "/usr/local/nvidia/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"}
    lib = {"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"}
    assert spec_smi({"containerEdits": {"mounts": [lib, smi]}}) == "/usr/local/nvidia/bin/nvidia-smi"
    assert spec_smi({"devices": [{"name": "0", "containerEdits": {"mounts": [smi]}}]}) == smi["hostPath"]
    assert spec_smi({"containerEdits": {"mounts": [lib]}}) is None


def test_each_step_says_what_it_needs_rather_than_failing_on_it(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    state = State(str(tmp_path))
    with pytest.raises(StepSkipped, match="needs the bundle"):
        build_cuda(recorder, Row("CUDA program", "", 0.0, ""), state, None)
    with pytest.raises(StepSkipped, match="needs the bundle"):
        build_image(recorder, Row("image", "", 0.0, ""), state)


def test_the_node_runtimes_spec_stands_in_where_the_nodes_python_made_none(tmp_path: Path) -> None:
    state = State(str(tmp_path))
    assert cdictk_spec(state) is None
    with pytest.raises(StepSkipped, match="needs the bundle and cdictk's spec"):
        host_baseline(Recorder(str(tmp_path), "r.json", "c.log", 600), Row("host", "", 0.0, ""), state, "x")
    state.loaded["runtime"] = {"devices": [{"name": "0"}]}
    assert cdictk_spec(state) == state.loaded["runtime"]
    state.loaded["cdictk"] = {"devices": [{"name": "1"}]}
    assert cdictk_spec(state) == state.loaded["cdictk"]
