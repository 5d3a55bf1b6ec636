"""realnode/check.py: its command line, what it refuses, and the frame around the steps."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from realnode import check
from realnode.checkstate import State
from realnode.nodefacts import Roots
from realnode.recorder import Recorder


def test_the_defaults_are_the_issues_figures() -> None:
    args = check.parse_args(["--out", "/tmp/report"])
    assert (args.budget, args.rounds, args.burst, args.parallel) == (420, 25, 64, 16)
    assert (args.driver_root, args.dev_root, args.proc_root, args.sys_root) == ("/", None, "/proc", "/sys")
    assert args.expect_smi == r"^GPU \d+: " and args.nvcc is None and not args.keep


def test_out_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        check.parse_args([])
    assert exited.value.code == 2
    assert "the following arguments are required: --out" in capsys.readouterr().err


def test_help_says_what_it_changes_and_where_the_report_goes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        check.parse_args(["--help"])
    shown = capsys.readouterr().out
    assert "real-node-report.json" in shown and "never /etc/cdi or /var/run/cdi" in shown
    assert "--expect-smi REGEX" in shown and "--budget BUDGET" in shown


def test_it_refuses_to_run_but_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert check.main(["--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "real-node-check: run it as root (runc, device nodes, mounts)\n"
    assert not (tmp_path / "out").exists()


def test_it_refuses_a_directory_that_is_not_a_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert check.main(["--out", str(tmp_path / "out"), "--bundle", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith("is not a bundle (no manifest.json): --bundle DIR\n")


def test_the_steps_get_the_roots_and_the_report_and_summary_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "manifest.json").write_text("{}")
    seen: dict[str, Any] = {}

    def steps(recorder: Recorder, args: argparse.Namespace, bundle: str, roots: Roots, state: State) -> None:
        seen.update(roots=roots, bundle=bundle, work=state.work)
        assert os.path.isdir(state.work) and state.work.startswith(str(tmp_path / "work"))
        with recorder.step("a step") as row:
            row.detail = "done"

    monkeypatch.setattr(check, "run_steps", steps)
    (tmp_path / "work").mkdir()
    out = tmp_path / "out"
    argv = ["--out", str(out), "--bundle", str(tmp_path / "bundle"), "--work", str(tmp_path / "work")]
    assert check.main([*argv, "--driver-root", "/node", "--proc-root", "/node/proc"]) == 0
    assert seen["roots"] == Roots("/node", "/node", "/node/proc", "/sys")  # the dev root: the driver's
    assert seen["bundle"] == str(tmp_path / "bundle")
    assert not os.path.exists(seen["work"])  # removed at the end
    report = json.loads((out / check.REPORT).read_text())
    assert [row["name"] for row in report["steps"]] == ["a step", "cleanup"]
    assert report["check"]["roots"]["dev"] == "/node" and report["check"]["budget_s"] == 420
    assert "containers left: 0; work dir removed" in report["steps"][1]["detail"]
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("real-node-check: 2 passed, 0 failed, 0 skipped in ")
    assert last.endswith(f"report {out / check.REPORT}")
    assert (out / check.LOG).exists()


def test_a_failed_step_is_exit_1_and_keep_keeps_the_work_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "manifest.json").write_text("{}")
    works = []

    def steps(recorder: Recorder, args: argparse.Namespace, bundle: str, roots: Roots, state: State) -> None:
        works.append(state.work)
        with recorder.step("broken"):
            raise RuntimeError("no GPU")

    monkeypatch.setattr(check, "run_steps", steps)
    argv = [
        "--out",
        str(tmp_path / "out"),
        "--bundle",
        str(tmp_path / "bundle"),
        "--work",
        str(tmp_path),
        "--keep",
    ]
    assert check.main(argv) == 1
    assert os.path.isdir(works[0])


def test_the_work_dir_goes_where_programs_may_run() -> None:
    assert check.work_parent("/srv/scratch") == "/srv/scratch"
    chosen = check.work_parent(None)
    assert not os.statvfs(chosen).f_flag & os.ST_NOEXEC
