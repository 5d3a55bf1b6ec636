"""The shim's shell front: straight to the low-level runtime for every command but create and run, and
through Python whenever the settings may have changed since it was written."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from cdictk.runtime.shimfront import front_text

MARK = "# test"


def _program(path: Path, name: str) -> None:
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" {name} "$@"\n')
    path.chmod(0o755)


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _program(bin_dir / "runc", "runc")
    _program(bin_dir / "crun", "crun")
    _program(tmp_path / "cdictk-runtime.py", "python")
    return tmp_path


def _front(base: Path, runtimes: list[str] | None, *, config_exists: bool = False) -> Path:
    front = base / "cdictk-runtime"
    text = front_text(
        str(front),
        str(base / "cdictk-runtime.py"),
        runtimes,
        config_exists=config_exists,
        mark=MARK,
        config=str(base / "config.toml"),
    )
    front.write_text(text)
    front.chmod(0o755)
    return front


def _run(front: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    path = f"{front.parent / 'bin'}:/usr/bin:/bin"
    result = subprocess.run(
        [str(front), *args], capture_output=True, text=True, env={"PATH": path, **(env or {})}, check=True
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "who"),
    [
        (["state", "x"], "runc"),
        (["--root", "/r", "--log", "create", "delete", "-f", "x"], "runc"),  # "create" is --log's value
        (["--debug", "kill", "x", "KILL"], "runc"),
        (["--root", "/r", "create", "--bundle", "/b", "x"], "python"),
        (["run", "x"], "python"),
        (["--help"], "python"),
        ([], "python"),
    ],
)
def test_only_create_and_run_start_python(setup: Path, args: list[str], who: str) -> None:
    assert _run(_front(setup, ["runc", "crun"]), *args) == [who, *args]


def test_the_first_runtime_found_wins_and_arguments_pass_untouched(setup: Path) -> None:
    args = ["state", "a b", "*", "$HOME", "it's"]
    assert _run(_front(setup, ["/nonexistent/runc", "crun"]), *args) == ["crun", *args]
    assert _run(_front(setup, [str(setup / "bin" / "runc")]), "state", "x") == ["runc", "state", "x"]
    assert _run(_front(setup, ["nothere"]), "state", "x") == ["python", "state", "x"]  # the shim says why


def test_settings_that_may_have_changed_send_everything_through_python(setup: Path) -> None:
    config = setup / "config.toml"
    front = _front(setup, ["runc"])  # written when there was no settings file
    assert _run(front, "state", "x")[0] == "runc"
    config.write_text("")
    assert _run(front, "state", "x")[0] == "python"  # one appeared since
    front = _front(setup, ["runc"], config_exists=True)
    past = time.time() - 60
    os.utime(config, (past, past))
    assert _run(front, "state", "x")[0] == "runc"
    os.utime(config, None)  # edited after the front was written
    assert _run(front, "state", "x")[0] == "python"
    os.utime(config, (past, past))
    assert _run(front, "state", "x", env={"CDICTK_CONFIG": str(config)})[0] == "python"
    config.unlink()
    assert _run(front, "state", "x")[0] == "python"  # the settings it was written from are gone
    assert _run(_front(setup, None), "state", "x")[0] == "python"  # unreadable settings: the shim says why
