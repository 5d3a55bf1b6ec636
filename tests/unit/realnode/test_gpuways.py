"""realnode/gpuways.py: a GPU container's row skips, naming what it lacks, before it spends a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from realnode.checkstate import State
from realnode.gpuways import gpu_way, injected
from realnode.recorder import Recorder, Row, StepSkipped


def test_a_way_without_cdictk_or_a_runc_that_runs_skips(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    state = State(str(tmp_path))
    with pytest.raises(StepSkipped, match="needs cdictk installed"):
        injected(recorder, state, "cdictk", ["/bin/true"])
    with pytest.raises(StepSkipped, match="needs the image and a runc that runs"):
        gpu_way(Row("GPU container", "", 0.0, ""), state, "GPU 0", {"root": {"path": "/"}})
