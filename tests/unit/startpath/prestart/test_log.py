"""The prestart hook's messages: stderr, and the node's log file (CDICTK_HOOK_LOG), since runc shows a
hook's stderr only when it fails and Docker passes no --debug."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.startpath.prestart.log import Log


def test_without_a_log_file_warnings_and_errors_go_to_stderr_debug_only_when_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CDICTK_HOOK_LOG", raising=False)
    monkeypatch.delenv("CDICTK_DEBUG", raising=False)
    log = Log("p")
    log.debug("hidden")
    log.warn("w")
    log.error("e")
    assert capsys.readouterr().err == "p: warning: w\np: e\n"
    for debug_env in ("1", "true"):
        monkeypatch.setenv("CDICTK_DEBUG", debug_env)
        Log("p").debug("shown")
        assert capsys.readouterr().err == "p: shown\n"
    for off in ("0", "false", "no", "False"):
        monkeypatch.setenv("CDICTK_DEBUG", off)
        Log("p").debug("hidden")
        assert capsys.readouterr().err == ""
    Log("p", debug=True).debug("shown by --debug")
    assert capsys.readouterr().err == "p: shown by --debug\n"


def test_the_log_file_gets_every_line_with_time_and_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hook.log"
    monkeypatch.setenv("CDICTK_HOOK_LOG", str(path))
    monkeypatch.delenv("CDICTK_DEBUG", raising=False)
    for message in ("first", "second"):
        log = Log("p")
        log.tag = "c1"
        log.debug(f"{message} debug")
        log.warn(f"{message} warning")
        log.close()
    lines = path.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "p [c1]: first debug",
        "p [c1]: warning: first warning",
        "p [c1]: second debug",
        "p [c1]: warning: second warning",
    ]
    assert lines[0][:4].isdigit() and "T" in lines[0].split(" ")[0]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert capsys.readouterr().err == "p: warning: first warning\np: warning: second warning\n"


def test_a_log_file_that_is_a_symlink_or_relative_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "hook.log"
    link.symlink_to(target)
    monkeypatch.setenv("CDICTK_HOOK_LOG", str(link))
    Log("p").error("e")
    assert not target.exists()
    err = capsys.readouterr().err
    assert err.startswith(f"p: warning: CDICTK_HOOK_LOG={link}: ") and err.endswith("p: e\n")
    monkeypatch.setenv("CDICTK_HOOK_LOG", "relative.log")
    Log("p").error("e")
    assert capsys.readouterr().err == "p: e\n"
    assert not Path("relative.log").exists()


@pytest.mark.root
def test_a_log_file_in_a_directory_others_could_change_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every writer: a user could have linked the name to a file of root's first."""
    os.chmod(tmp_path, 0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 12345, 12345)
    monkeypatch.setenv("CDICTK_HOOK_LOG", str(shared / "hook.log"))
    Log("p").error("e")
    assert os.listdir(shared) == []
    err = capsys.readouterr().err
    assert err.startswith(f"p: warning: CDICTK_HOOK_LOG={shared}/hook.log: ") and "owned by uid 12345" in err


@pytest.mark.root
def test_a_log_file_a_user_planted_in_a_sticky_directory_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/tmp`` passes the directory check, so anyone may make the name first: a file of theirs (every
    container's lines for them to read), a hard link to a file of root's, a FIFO. Before: the hook
    appended to whatever regular file or FIFO was there."""
    os.chmod(tmp_path, 0o755)
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    path = sticky / "hook.log"
    monkeypatch.setenv("CDICTK_HOOK_LOG", str(path))
    roots = tmp_path / "roots-file"
    roots.write_text("")
    os.chmod(roots, 0o600)
    os.mkfifo(sticky / "fifo")
    reader = os.open(sticky / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # a reader: the open would succeed

    def theirs() -> None:
        path.write_text("")
        os.chown(path, 12345, 12345)

    try:
        for plant, why in (
            (theirs, "owned by uid 12345, not root"),
            (lambda: os.link(roots, path), "has 2 hard links"),
            (lambda: os.rename(sticky / "fifo", path), "not a regular file"),
        ):
            plant()
            Log("p").error("secret")
            assert (
                capsys.readouterr().err
                == f"p: warning: CDICTK_HOOK_LOG={path}: {why}; not written\np: secret\n"
            )
            os.unlink(path)
        assert roots.read_text() == ""
    finally:
        os.close(reader)
    Log("p").error("root's own")  # made by root: written
    capsys.readouterr()
    assert path.read_text().endswith("p: root's own\n")
