"""The runtime log: the file --log names, as runc writes it and containerd reads it back."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from cdictk.startpath.shim.runtimelog import RuntimeLog


def last_runtime_error(path: Path) -> str:
    """What containerd's runc shim reports for a failed command: the ``msg`` of the log's last line
    whose level is ``error``, every line decoded as JSON with an RFC 3339 ``time`` (a line that does
    not decode makes it report that it could not retrieve the error: a failure here)."""
    found = ""
    for line in path.read_text().splitlines():
        record = json.loads(line)
        assert set(record) == {"level", "msg", "time"}, record
        parsed = datetime.datetime.fromisoformat(record["time"])
        assert parsed.tzinfo is not None, record["time"]
        if record["level"] == "error":
            found = record["msg"].strip()
    return found


@pytest.mark.parametrize(
    ("args", "path", "json_format"),
    [
        (["--root", "/r", "--log", "/l.json", "--log-format", "json", "create", "--bundle", "b", "id"], "/l.json", True),
        (["--log-format=json", "--log", "/oci-log", "create", "id"], "/oci-log", True),  # podman's conmon
        (["--log=/x", "start", "id"], "/x", False),  # runc's default: text
        (["--log", "/x", "--log-format", "text", "state", "id"], "/x", False),
        (["--log", "/a", "--log=/b", "kill", "id"], "/b", False),  # the last one counts
        (["create", "--log", "/not-global", "id"], None, False),  # after the subcommand: not the runtime's
        (["--log"], None, False),  # no value
        ([], None, False),
    ],
)  # fmt: skip
def test_the_log_is_runcs_global_option(args: list[str], path: str | None, json_format: bool) -> None:
    log = RuntimeLog.from_args(args)
    assert (log.path, log.json) == (path, json_format)


def test_an_error_is_the_logs_last_error_and_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.json"
    path.write_text('{"level":"error","msg":"an earlier one","time":"2024-01-01T00:00:00Z"}\n')
    log = RuntimeLog(str(path), json=True)
    log.warning("cdictk-runtime: warning: a note")
    log.error('cdictk-runtime: error: nvidia.com/gpu=9: "unresolvable" \\ é')
    assert last_runtime_error(path) == 'cdictk-runtime: error: nvidia.com/gpu=9: "unresolvable" \\ é'
    lines = path.read_text().splitlines()
    assert len(lines) == 3  # appended, never truncated
    assert lines[1].startswith('{"level":"warning","msg":"cdictk-runtime: warning: a note","time":"')
    assert lines[2].startswith('{"level":"error","msg":"cdictk-runtime: error: nvidia.com/gpu=9: ')
    assert capsys.readouterr().err == 'cdictk-runtime: error: nvidia.com/gpu=9: "unresolvable" \\ é\n'


def test_a_warning_goes_to_the_log_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under containerd, the runtime's stderr in create is the container's: a warning there would be
    the workload's first log line."""
    path = tmp_path / "new" / "log.json"
    path.parent.mkdir()
    old = os.umask(0)
    try:
        RuntimeLog(str(path), json=True).warning("cdictk-runtime: warning: ignored")
    finally:
        os.umask(old)
    assert capsys.readouterr().err == ""
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)  # as runc makes it
    assert json.loads(path.read_text())["level"] == "warning"
    assert last_runtime_error(path) == ""


def test_text_format_is_logrus_text(tmp_path: Path) -> None:
    path = tmp_path / "log"
    RuntimeLog(str(path), json=False).warning('cdictk-runtime: warning: say "x"')
    line = path.read_text()
    assert line.endswith(' level=warning msg="cdictk-runtime: warning: say \\"x\\""\n'), line
    stamp = line.split('"')[1]
    assert line.startswith(f'time="{stamp}" ')
    assert datetime.datetime.fromisoformat(stamp).tzinfo is not None


def test_without_a_log_or_one_that_cannot_be_opened_both_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RuntimeLog(None, json=True).warning("cdictk-runtime: warning: w")
    RuntimeLog(None, json=True).error("cdictk-runtime: error: e")
    RuntimeLog(str(tmp_path / "missing-dir" / "log.json"), json=True).warning("cdictk-runtime: warning: v")
    assert capsys.readouterr().err == (
        "cdictk-runtime: warning: w\ncdictk-runtime: error: e\ncdictk-runtime: warning: v\n"
    )
