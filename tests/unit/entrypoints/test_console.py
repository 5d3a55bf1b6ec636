"""The ``cdictk`` console script: ``cdictk hook ...`` to the hooks without click (``prestart`` to the
legacy prestart hook, with the slow path it falls back on), every other command to click."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.cli.main import main as cli_main
from cdictk.entrypoints.console import main as launch
from cdictk.startpath.prestart.main import LEGACY_NAME
from tests.unit.startpath.hooks.test_entry import state_for
from tests.unit.startpath.prestart.test_main import one_error_line


def test_the_command_line_dispatches_prestart(capsys: pytest.CaptureFixture[str]) -> None:
    """`cdictk hook prestart` reaches the legacy hook from cdictk's command line, not through the hook
    entry point: hooks/ never imports the runtime."""
    assert launch(["hook", "prestart", "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: {LEGACY_NAME} ") and "cdictk hook [--debug] prestart" in out and err == ""
    assert launch(["hook", "--debug", "prestart", "extra"]) == 2
    assert capsys.readouterr().err.startswith(f"usage: {LEGACY_NAME} ")
    # The options before the name are read as the hook entry point reads them, in Go's forms too.
    for options in (["-d"], ["-debug=true"], ["--debug=false", "--quiet"]):
        assert launch(["hook", *options, "prestart", "-h"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: {LEGACY_NAME} ")
    assert launch(["hook", "--verbose", "prestart"]) == 2
    assert capsys.readouterr().err == "cdictk hook: before the hook name: unknown option --verbose\n"


def test_the_command_line_reads_the_state(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert launch(["hook", "prestart"]) == 1
    assert "OCI state on stdin: empty" in one_error_line(capsys.readouterr().err)


def test_the_debug_flag_reaches_the_legacy_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the name, in any of its forms, as `--debug` after it; the slow path handed in."""
    from cdictk.startpath.misses import Misses
    from cdictk.startpath.prestart import main as prestart

    seen: list[tuple[list[str], Misses]] = []

    def fake(argv: list[str], *, misses: Misses) -> int:
        seen.append((argv, misses))
        return 7

    monkeypatch.setattr(prestart, "main", fake)
    assert launch(["hook", "-d", "prestart"]) == 7
    assert launch(["hook", "--quiet", "prestart", "--config", "/x.toml"]) == 7
    assert [argv for argv, _ in seen] == [["--debug", "prestart"], ["prestart", "--config", "/x.toml"]]
    assert all(isinstance(misses, Misses) for _, misses in seen)


def test_every_other_hook_goes_to_the_hook_entry_point(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-I", "-m", "cdictk", "hook", "create-symlinks", "--link", "x::/y"],
        input=state_for(tmp_path),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert os.readlink(tmp_path / "y") == "x"


def test_cdictk_hook_skips_the_cli() -> None:
    """`cdictk hook ...` is routed before click and the other commands are imported."""
    result = subprocess.run(
        [sys.executable, "-I", "-X", "importtime", "-m", "cdictk", "hook", "noop"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "cdictk.startpath.hooks.entry" in imported
    assert not {"click", "yaml", "cdictk.cli.main"} & imported


def test_every_other_command_goes_to_click(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch(["--version"]) == 0
    assert capsys.readouterr().out.startswith("cdictk, version ")


def test_the_command_line_group_alone_runs_no_hook(capsys: pytest.CaptureFixture[str]) -> None:
    """`cdictk hook` is listed in the group's help, but runs only from the console script: the group
    has not the slow path the legacy hook falls back on."""
    assert cli_main(["hook", "prestart"]) == 2
    assert "runs from the cdictk program" in capsys.readouterr().err
