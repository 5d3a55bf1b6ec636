"""How every command ends: umask 022, a CdictkError as one line and status 1, a closed pipe as no failure."""

from __future__ import annotations

import os
import sys

import pytest

from cdictk.cli.guard import guarded
from cdictk.startpath.helpers.errors import CdictkError


def test_a_command_runs_under_umask_022_and_its_status_is_kept(umask_000: None) -> None:
    seen = []

    def command() -> int:
        seen.append(os.umask(0o022))
        return 3

    assert guarded(command) == 3 and seen == [0o022]
    assert guarded(lambda: None) == 0  # a command that returns no status succeeded


def test_an_input_problem_is_one_line_and_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    def command() -> int:
        raise CdictkError("spec.yaml", "kind", "not a kind")

    assert guarded(command) == 1
    assert capsys.readouterr().err == "cdictk: error: spec.yaml: kind: not a kind\n"


def test_a_reader_that_went_away_is_no_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = []
    monkeypatch.setattr(sys, "stderr", type("Err", (), {"close": lambda self: closed.append(True)})())

    def command() -> int:
        raise BrokenPipeError

    assert guarded(command) == 0 and closed == [True]


def test_anything_else_is_a_bug_and_propagates() -> None:
    def command() -> int:
        raise KeyError("x")

    with pytest.raises(KeyError):
        guarded(command)
