"""realnode/recorder.py: how the check runs a command and waits for it, its rows, and its report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from realnode.recorder import FAIL, PASS, SKIP, TAIL, Recorder, Result, StepSkipped, wait_exact


def test_the_exit_status_comes_back() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_exact(process, 30) == 3


def test_a_process_past_its_timeout_raises_and_is_left_to_the_caller() -> None:
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exact(process, 0.2)
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_no_polling_wait_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # Popen.wait(timeout) sleeps in steps of up to 50 ms, which quantises every start the check times.
    calls: list[object] = []
    real_wait = subprocess.Popen.wait

    def wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        calls.append(timeout)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    process = subprocess.Popen(["true"])
    assert wait_exact(process, 30) == 0
    assert calls == [None]


# The rows and the report.


def recorder_in(tmp_path: Path, budget: float = 600) -> Recorder:
    return Recorder(str(tmp_path), "report.json", "check.log", budget)


def report_of(tmp_path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    return loaded


def test_a_failing_command_ends_its_row_with_its_last_line_and_keeps_its_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = recorder_in(tmp_path)
    script = "echo starting >&2; for i in $(seq 1 400); do echo line $i; done; echo broken >&2; exit 4"
    with recorder.step("a failing step") as row:
        result = recorder.run(["sh", "-c", script], 30)
        recorder.fail(row, result)
        raise AssertionError("fail() returns")  # pragma: no cover
    (row,) = recorder.rows
    assert row.status == FAIL
    assert row.detail == "sh: exit 4: broken"  # what it said went wrong, not its last output
    # The tail only, of 3000-odd characters: stderr whole, then the end of stdout.
    assert row.tail.startswith("starting\nbroken\n") and row.tail.endswith("line 400")
    assert len(row.tail) == TAIL
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["STEP", "RESULT", "SECONDS", "DETAIL"]
    assert printed[1].startswith("a failing step") and " FAIL " in printed[1]
    assert printed[-1].endswith("| line 400")  # the tail's last lines under the row
    saved = report_of(tmp_path)
    assert saved["summary"]["FAIL"] == 1
    assert saved["steps"][0]["tail"] == row.tail


def test_a_step_that_raises_is_a_failed_row_and_the_next_one_runs(tmp_path: Path) -> None:
    recorder = recorder_in(tmp_path)
    with recorder.step("raises"):
        raise KeyError("devices")
    with recorder.step("after") as row:
        row.detail = "ran"
    assert [(row.name, row.status, row.detail) for row in recorder.rows] == [
        ("raises", FAIL, "KeyError: 'devices'"),
        ("after", PASS, "ran"),
    ]
    assert recorder.failed() == [recorder.rows[0]]


def test_a_skipped_step_says_why_and_does_not_fail_the_check(tmp_path: Path) -> None:
    recorder = recorder_in(tmp_path)
    with recorder.step("needs a tool"):
        raise StepSkipped("NVIDIA's tools are not in the bundle")
    (row,) = recorder.rows
    assert (row.status, row.detail) == (SKIP, "NVIDIA's tools are not in the bundle")
    assert recorder.failed() == []
    assert report_of(tmp_path)["summary"]["skip"] == 1


def test_a_step_the_budget_cannot_hold_is_skipped_and_the_next_one_runs(tmp_path: Path) -> None:
    recorder = recorder_in(tmp_path, budget=30)
    ran = []
    with recorder.step("long"):
        recorder.need(40)
        ran.append("long")
    with recorder.step("short"):
        recorder.need(10)
        ran.append("short")
    assert ran == ["short"]
    assert recorder.rows[0].status == SKIP
    assert recorder.rows[0].detail.endswith("s of the budget left, the step needs about 40")
    assert recorder.rows[1].status == PASS


def test_the_report_is_rewritten_after_every_row(tmp_path: Path) -> None:
    recorder = recorder_in(tmp_path)
    recorder.sections["check"] = {"budget_s": 600}
    seen = []
    for name in ("first", "second", "third"):
        with recorder.step(name) as row:
            row.data["n"] = name
            if (tmp_path / "report.json").exists():
                seen.append([step["name"] for step in report_of(tmp_path)["steps"]])
    assert seen == [["first"], ["first", "second"]]
    saved = report_of(tmp_path)
    assert [step["data"]["n"] for step in saved["steps"]] == ["first", "second", "third"]
    assert saved["check"] == {"budget_s": 600}
    assert saved["summary"]["pass"] == 3
    assert not (tmp_path / "report.json.tmp").exists()


def test_the_budget_left_counts_down_from_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    recorder = recorder_in(tmp_path, budget=420)
    now[0] += 100
    assert recorder.left() == 320
    assert recorder.elapsed() == 100
    now[0] += 400
    assert recorder.left() == -80


def test_a_command_never_waits_past_the_budget_but_gets_five_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = recorder_in(tmp_path, budget=420)
    given: list[float] = []
    real = wait_exact

    def wait(process: subprocess.Popen[bytes], timeout: float) -> int:
        given.append(timeout)
        return real(process, timeout)

    monkeypatch.setattr("realnode.recorder.wait_exact", wait)
    recorder.run(["true"], 90)
    recorder.deadline = time.monotonic() + 30
    recorder.run(["true"], 90)
    recorder.deadline = time.monotonic() - 100
    recorder.run(["true"], 90)
    assert given[0] == 90
    assert 29 < given[1] <= 30
    assert given[2] == 5


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    recorder = recorder_in(tmp_path, budget=30)
    recorder.deadline = time.monotonic() - 1  # every command gets the least: 5 s
    marker = tmp_path / "child.pid"
    began = time.monotonic()
    result = recorder.run(["sh", "-c", f"sleep 60 & echo $! > {marker}; wait"], 1)
    assert 5 <= time.monotonic() - began < 15
    assert result.returncode is None and not result.ok
    assert result.why() == "sh: timed out"
    child = int(marker.read_text())
    for _ in range(100):  # the group was killed: the orphaned sleep goes too
        stat = Path(f"/proc/{child}/stat")
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"sleep {child} outlived its timeout")


def test_a_program_that_cannot_start_is_exit_127_with_its_reason(tmp_path: Path) -> None:
    result = recorder_in(tmp_path).run([str(tmp_path / "absent")], 10)
    assert result.returncode == 127
    assert result.why() == "absent: exit 127: " + str(tmp_path / "absent") + ": No such file or directory"


def test_every_command_is_in_the_log_with_its_output(tmp_path: Path) -> None:
    recorder = recorder_in(tmp_path)
    recorder.run(["sh", "-c", "echo said; echo warned >&2"], 10)
    recorder.run(["sh", "-c", "echo hushed"], 10, quiet=True)
    recorder.close()
    log = (tmp_path / "check.log").read_text()
    assert "$ sh -c echo said; echo warned >&2\n  (exit 0, " in log
    assert "  stdout:\n    said\n" in log and "  stderr:\n    warned\n" in log
    assert "$ sh -c echo hushed" in log and "hushed\n" not in log.split("$ sh -c echo hushed")[1]


def test_a_long_stderr_does_not_push_the_end_of_stdout_out_of_the_tail() -> None:
    result = Result(["runc"], 1, "container said: ok\n", "warning\n" * 1000 + "runc: exec failed\n", 5.0)
    assert result.tail().endswith("runc: exec failed\ncontainer said: ok")
    assert len(result.tail()) <= TAIL
    assert result.why() == "runc: exit 1: runc: exec failed"
    quiet = Result(["/opt/x/probe"], 2, "probe: cuInit failed: 999\n", "", 5.0)
    assert quiet.why() == "probe: exit 2: probe: cuInit failed: 999"
    assert Result(["true"], 0, "", "", 1.0).why() == "true: exit 0"
