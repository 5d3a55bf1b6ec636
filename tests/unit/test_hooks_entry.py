from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.hooks.__main__ import main
from cdictk.nvcdi.hooks import hook_program


def test_unknown_hook_warns_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["update-application-profile", "--whatever"]) == 0
    assert capsys.readouterr().err == "cdictk hook: unsupported hook 'update-application-profile'; ignored\n"


def test_no_hook_name_is_a_usage_error() -> None:
    assert main([]) == 2


def test_entry_point_runs_isolated_from_the_environment() -> None:
    result = subprocess.run(
        [sys.executable, "-I", "-m", "cdictk.hooks", "no-such-hook"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": "/nonexistent", "LC_ALL": "C"},
        check=False,
    )
    assert result.returncode == 0
    assert "unsupported hook 'no-such-hook'; ignored" in result.stderr


def test_generated_hook_finds_cdictk_as_a_runtime_runs_it(tmp_path: Path) -> None:
    """argv[0], env and cwd exactly as runc and crun give them: Python must not find another interpreter."""
    hook = hook_program().hook("no-such-hook", [])
    result = subprocess.run(
        hook.args,
        executable=hook.path,
        env=dict(entry.split("=", 1) for entry in hook.env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "unsupported hook 'no-such-hook'; ignored" in result.stderr
