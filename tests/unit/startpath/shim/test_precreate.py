"""cdictk-precreate, podman's precreate hook: config on stdin, config (or one line) out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOOK = [sys.executable, "-m", "cdictk.entrypoints.precreate"]
SPEC = """\
cdiVersion: 0.5.0
kind: vendor.com/gpu
devices:
- name: "0"
  containerEdits: {deviceNodes: [{path: /dev/null}]}
"""


def environment(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "cdi").mkdir(exist_ok=True)
    (tmp_path / "cdi" / "a.yaml").write_text(SPEC)
    settings = tmp_path / "config.toml"
    settings.write_text(
        f'[runtime]\nspec-dirs = ["{tmp_path / "cdi"}"]\n[requests]\naccept-env-unprivileged = true\n'
    )
    return {"CDICTK_CONFIG": str(settings), "CDICTK_CACHE_DIR": os.environ["CDICTK_CACHE_DIR"]}


def hook(tmp_path: Path, config: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = environment(tmp_path)
    return subprocess.run([*HOOK, *args], input=config, capture_output=True, env=env, check=False)


def test_a_config_asking_for_nothing_comes_back_byte_for_byte(tmp_path: Path) -> None:
    config = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}, indent=3).encode()
    result = hook(tmp_path, config)
    assert (result.returncode, result.stdout, result.stderr) == (0, config, b"")


def test_a_request_comes_back_applied(tmp_path: Path) -> None:
    config = json.dumps({"annotations": {"cdi.k8s.io/x": "vendor.com/gpu=0"}}).encode()
    result = hook(tmp_path, config)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["linux"]["devices"][0]["path"] == "/dev/null"


def test_a_config_applied_already_comes_back_byte_for_byte(tmp_path: Path) -> None:
    applied = hook(tmp_path, json.dumps({"annotations": {"cdi.k8s.io/x": "vendor.com/gpu=0"}}).encode())
    assert applied.returncode == 0 and json.loads(applied.stdout)["linux"]["devices"], applied.stderr
    config = json.dumps(json.loads(applied.stdout), indent=3).encode()
    result = hook(tmp_path, config)
    assert (result.returncode, result.stdout, result.stderr) == (0, config, b"")


@pytest.mark.parametrize(
    "config",
    [
        {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-x y"]}},
        {"annotations": {"cdi.k8s.io/x": "vendor.com/gpu=7"}},
        [1],
    ],
)
def test_a_request_that_cannot_be_met_is_one_line_and_no_config(tmp_path: Path, config: object) -> None:
    result = hook(tmp_path, json.dumps(config).encode())
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode().count("\n") == 1 and result.stderr.startswith(b"cdictk-precreate: error: ")


def test_help_and_a_terminal_never_wait_for_stdin(tmp_path: Path) -> None:
    result = hook(tmp_path, b"", "--help")
    assert result.returncode == 0 and result.stdout.startswith(b"usage: cdictk-precreate")
    result = hook(tmp_path, b"", "extra")
    assert result.returncode == 2 and result.stderr.startswith(b"usage: cdictk-precreate")
