"""The programs in examples/: they run as their docstrings say, on the fake eight-GPU node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO
from tests.conftest import NodeFactory
from tests.fakenode.node import FakeNode

AGENT = REPO / "examples" / "node_agent.py"


def agent(node: FakeNode, tmp_path: Path, calls: list[dict[str, object]]) -> subprocess.CompletedProcess[str]:
    calls_file = tmp_path / "calls.json"
    calls_file.write_text(json.dumps({"calls": calls}))
    command = [
        sys.executable,
        str(AGENT),
        str(calls_file),
        "--spec-dir",
        str(tmp_path / "cdi"),
        "--state-dir",
        str(tmp_path / "state"),
        *("--driver-root", node.root, "--proc-root", node.proc, "--sys-root", node.sys),
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.mark.root
def test_the_node_agent_prepares_unprepares_and_stays_clean_across_restarts(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    first = agent(
        node,
        tmp_path,
        [
            {"prepare": "claim-a", "devices": ["1", "0:1"]},
            {"prepare": "claim-b", "devices": [node.preset.gpus[2].uuid]},
            {"prepare": "claim-c", "devices": ["3"]},
            {"unprepare": "claim-a"},
            {"unprepare": "claim-a"},
        ],
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "prepare claim-a: nvidia.com/gpu=claim-a-1 nvidia.com/gpu=claim-a-0:1",
        f"prepare claim-b: nvidia.com/gpu=claim-b-{node.preset.gpus[2].uuid}",
        "prepare claim-c: nvidia.com/gpu=claim-c-3",
        "unprepare claim-a",
        "unprepare claim-a",
    ]
    spec_dir = tmp_path / "cdi"
    assert sorted(os.listdir(spec_dir)) == ["nvidia.com-gpu_claim-b.json", "nvidia.com-gpu_claim-c.json"]

    # The agent died after writing a spec and before its checkpoint: the next start collects it, and
    # leaves the checkpointed claims and another producer's spec alone.
    stale = (spec_dir / "nvidia.com-gpu_claim-b.json").read_text().replace("claim-b", "claim-z")
    (spec_dir / "nvidia.com-gpu_claim-z.json").write_text(stale)
    (spec_dir / "example.com-fpga_claim-z.json").write_text("{}")
    second = agent(node, tmp_path, [{"unprepare": "claim-c"}])
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["collected 1 stale claim spec(s): claim-z", "unprepare claim-c"]
    assert sorted(os.listdir(spec_dir)) == ["example.com-fpga_claim-z.json", "nvidia.com-gpu_claim-b.json"]


@pytest.mark.root
def test_the_node_agent_fails_in_one_line(make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("eight")
    result = agent(node, tmp_path, [{"prepare": "claim-a", "devices": ["0"]}])
    assert result.returncode == 1
    assert result.stderr == (
        "node-agent: device id: '0': GPU 0 is in MIG mode (its MIG devices: 0:0, 0:1, 0:2)\n"
    )


def test_the_node_agent_uses_only_documented_names() -> None:
    import ast

    from cdictk import api

    tree = ast.parse(AGENT.read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "cdictk.api"
        for alias in node.names
    }
    assert {module for module in modules if module and module.startswith("cdictk")} == {"cdictk.api"}
    assert names <= set(api.__all__)
