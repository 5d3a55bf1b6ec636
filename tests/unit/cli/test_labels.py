"""``cdictk node-labels`` on the fake eight-GPU node: the whole file for each MIG strategy (the labels
NVIDIA's GPU feature discovery writes there, bench/compare_labels.py), a MIG reconfiguration followed by
--watch, and bad input as one line and exit status 1."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.labels.featurefile import HEADER
from tests.conftest import NodeFactory
from tests.unit.cli.test_generate_watch import DEADLINE, wait_for

pytestmark = pytest.mark.root

# The eight-GPU node (GPU 0 in MIG mode with a 3g.40gb and two 1g.10gb devices) with --mig-strategy none.
EIGHT_NONE = """\
nvidia.com/cuda.driver-version.full=580.95.05
nvidia.com/cuda.driver-version.major=580
nvidia.com/cuda.driver-version.minor=95
nvidia.com/cuda.driver-version.revision=05
nvidia.com/cuda.driver.major=580
nvidia.com/cuda.driver.minor=95
nvidia.com/cuda.driver.rev=05
nvidia.com/cuda.runtime-version.full=13.0
nvidia.com/cuda.runtime-version.major=13
nvidia.com/cuda.runtime-version.minor=0
nvidia.com/cuda.runtime.major=13
nvidia.com/cuda.runtime.minor=0
nvidia.com/gpu.compute.major=9
nvidia.com/gpu.compute.minor=0
nvidia.com/gpu.count=8
nvidia.com/gpu.family=hopper
nvidia.com/gpu.machine=DGX-H100
nvidia.com/gpu.memory=81559
nvidia.com/gpu.mode=compute
nvidia.com/gpu.present=true
nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
nvidia.com/gpu.replicas=1
nvidia.com/gpu.sharing-strategy=none
nvidia.com/mig.capable=true
nvidia.com/mps.capable=false
nvidia.com/vgpu.present=false
"""
# What single changes: GPU 0 alone is in MIG mode, so the node cannot be offered MIG devices only.
SINGLE = {
    "nvidia.com/gpu.count": "0",
    "nvidia.com/gpu.memory": "0",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/gpu.sharing-strategy": "",
    "nvidia.com/mig.strategy": "single",
}
# What mixed adds: a set per profile.
MIXED_ADDS = """\
nvidia.com/mig-1g.10gb.count=2
nvidia.com/mig-1g.10gb.engines.copy=1
nvidia.com/mig-1g.10gb.engines.decoder=1
nvidia.com/mig-1g.10gb.engines.encoder=0
nvidia.com/mig-1g.10gb.engines.jpeg=1
nvidia.com/mig-1g.10gb.engines.ofa=0
nvidia.com/mig-1g.10gb.memory=9856
nvidia.com/mig-1g.10gb.multiprocessors=16
nvidia.com/mig-1g.10gb.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb
nvidia.com/mig-1g.10gb.replicas=1
nvidia.com/mig-1g.10gb.sharing-strategy=none
nvidia.com/mig-1g.10gb.slices.ci=1
nvidia.com/mig-1g.10gb.slices.gi=1
nvidia.com/mig-3g.40gb.count=1
nvidia.com/mig-3g.40gb.engines.copy=3
nvidia.com/mig-3g.40gb.engines.decoder=3
nvidia.com/mig-3g.40gb.engines.encoder=0
nvidia.com/mig-3g.40gb.engines.jpeg=3
nvidia.com/mig-3g.40gb.engines.ofa=0
nvidia.com/mig-3g.40gb.memory=40192
nvidia.com/mig-3g.40gb.multiprocessors=60
nvidia.com/mig-3g.40gb.product=NVIDIA-H100-80GB-HBM3-MIG-3g.40gb
nvidia.com/mig-3g.40gb.replicas=1
nvidia.com/mig-3g.40gb.sharing-strategy=none
nvidia.com/mig-3g.40gb.slices.ci=3
nvidia.com/mig-3g.40gb.slices.gi=3
nvidia.com/mig.strategy=mixed
"""


def labels(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("none", labels(EIGHT_NONE)),
        ("single", {**labels(EIGHT_NONE), **SINGLE}),
        ("mixed", {**labels(EIGHT_NONE), **labels(MIXED_ADDS)}),
    ],
)
def test_the_whole_file_for_each_mig_strategy(
    strategy: str, expected: dict[str, str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    output = tmp_path / "features.d" / "cdictk-gpu"
    assert main(["node-labels", *node.cli_args(), "--mig-strategy", strategy, "--output", str(output)]) == 0
    text = output.read_text()
    assert text == "\n".join([HEADER, *(f"{name}={expected[name]}" for name in sorted(expected))]) + "\n"
    assert (output.stat().st_mode & 0o777) == 0o644


def test_the_settings_file_gives_strategy_and_replicas(make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("eight")
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/mig-1g.10gb\n      replicas: 3\n"
    )
    output = tmp_path / "cdictk-gpu"
    assert main(["node-labels", *node.cli_args(), "--config", str(settings), "--output", str(output)]) == 0
    found = labels(output.read_text())
    assert found["nvidia.com/mig.strategy"] == "mixed"
    assert found["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert found["nvidia.com/mig-1g.10gb.replicas"] == "3"
    assert found["nvidia.com/mig-3g.40gb.replicas"] == "1"
    assert (
        main(
            [
                "node-labels",
                *node.cli_args(),
                "--config",
                str(settings),
                "--mig-strategy",
                "none",
                "-o",
                str(output),
            ]
        )
        == 0
    )
    assert "nvidia.com/mig.strategy" not in labels(output.read_text())


def test_watch_follows_a_mig_reconfiguration_and_removes_the_file_when_stopped(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    output = tmp_path / "features.d" / "cdictk-gpu"
    command = [
        sys.executable,
        "-m",
        "cdictk",
        "node-labels",
        "--watch",
        "--interval",
        "0.2",
        *node.cli_args(),
    ]
    process = subprocess.Popen(
        [*command, "--mig-strategy", "mixed", "--output", str(output)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(output.exists, "the first labels")
        first = output.read_text()
        assert "# +expiry-time=" in first and "nvidia.com/mig-3g.40gb.count=1" in first
        node.reconfigure_mig(node.preset.migs[1:])  # `nvidia-smi mig -dci -dgi` of the 3g.40gb
        took = wait_for(lambda: "mig-3g.40gb" not in output.read_text(), "the MIG change")
        print(f"MIG reconfiguration in the labels after {took:.2f} s")
        assert labels(output.read_text())["nvidia.com/mig-1g.10gb.count"] == "2"
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(DEADLINE)
        err = process.stderr.read() if process.stderr else ""
    assert code == 0, err
    assert not output.exists() and f"removed {output}" in err
    assert err.count("wrote ") == 2


@pytest.mark.parametrize(
    ("arguments", "settings", "message"),
    [
        (["--watch", "--output", "-"], None, "--watch: needs a file to write"),
        ([], "flags:\n  migStrategy: all\n", "flags.migStrategy: must be one of none, single, mixed"),
        ([], "version: v1\nversion: v1\n", "duplicate key"),
        (
            [],
            "sharing: " + "[" * 20000 + "]" * 20000 + "\n",
            "settings.yaml: invalid YAML: exceeded maximum nesting",
        ),
        ([], "".join(f"{' ' * depth}flags:\n" for depth in range(200)), "nested deeper than 64 levels"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(
    arguments: list[str],
    settings: str | None,
    message: str,
    *,
    make_node: NodeFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = make_node("single")
    output = tmp_path / "cdictk-gpu"
    config = []
    if settings is not None:
        (tmp_path / "settings.yaml").write_text(settings)
        config = ["--config", str(tmp_path / "settings.yaml")]
    assert main(["node-labels", *node.cli_args(), *config, "--output", str(output), *arguments]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err and err.startswith("cdictk: error: ")
    assert not output.exists()


def test_a_node_without_gpus_writes_nothing(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("single")
    config = node.nvml_config()
    config.gpus = []
    node.write_nvml_config(config)
    output = tmp_path / "cdictk-gpu"
    assert main(["node-labels", *node.cli_args(), "--output", str(output)]) == 1
    assert "NVML reports no GPU" in capsys.readouterr().err and not output.exists()
