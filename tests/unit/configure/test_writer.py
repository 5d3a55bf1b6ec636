from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from cdictk.configure import writer
from cdictk.startpath.helpers.errors import CdictkError


def test_read_missing_regular_and_refused(tmp_path: Path) -> None:
    assert writer.read(str(tmp_path / "none.toml"), follow_symlinks=False).text is None
    (tmp_path / "a.toml").write_text("x = 1\n")
    assert writer.read(str(tmp_path / "a.toml"), follow_symlinks=False).text == "x = 1\n"
    (tmp_path / "link.toml").symlink_to(tmp_path / "a.toml")
    with pytest.raises(CdictkError, match="is a symlink; refusing to replace it"):
        writer.read(str(tmp_path / "link.toml"), follow_symlinks=False)
    followed = writer.read(str(tmp_path / "link.toml"), follow_symlinks=True)
    assert followed.path == str(tmp_path / "a.toml")
    with pytest.raises(CdictkError, match="not a regular file"):
        writer.read(str(tmp_path), follow_symlinks=False)
    with pytest.raises(CdictkError, match="must be an absolute path"):
        writer.read("relative.toml", follow_symlinks=False)
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(CdictkError, match="not UTF-8"):
        writer.read(str(tmp_path / "bin.toml"), follow_symlinks=False)


def test_commit_backs_up_once_keeps_mode_and_skips_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("original\n")
    os.chmod(path, 0o640)
    current = writer.read(str(path), follow_symlinks=False)
    assert writer.commit(current, "original\n", dry_run=False) is False
    assert not (tmp_path / "config.toml.cdictk.orig").exists()
    assert writer.commit(current, "first\n", dry_run=False) is True
    assert (tmp_path / "config.toml.cdictk.orig").read_text() == "original\n"
    assert path.read_text() == "first\n" and (path.stat().st_mode & 0o777) == 0o640
    writer.commit(writer.read(str(path), follow_symlinks=False), "second\n", dry_run=False)
    assert (tmp_path / "config.toml.cdictk.orig").read_text() == "original\n"  # one time
    assert sorted(os.listdir(tmp_path)) == ["config.toml", "config.toml.cdictk.orig"]  # no temp files


def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.toml"
    path.write_text("a = 1\n")
    assert writer.commit(writer.read(str(path), follow_symlinks=False), "a = 2\n", dry_run=True)
    out = capsys.readouterr().out
    assert f"--- {path}\n+++ {path}\n" in out and "-a = 1\n+a = 2\n" in out
    assert path.read_text() == "a = 1\n" and not (tmp_path / "config.toml.cdictk.orig").exists()


def test_delete_and_create_in_a_new_directory(tmp_path: Path) -> None:
    drop = tmp_path / "conf.d" / "99.toml"
    assert writer.commit(
        writer.read(str(drop), follow_symlinks=False), "x = 1\n", dry_run=False, backup=False
    )
    assert drop.read_text() == "x = 1\n"
    assert writer.commit(writer.read(str(drop), follow_symlinks=False), None, dry_run=False, backup=False)
    assert os.listdir(drop.parent) == []


def test_lock_serialises_runs(tmp_path: Path) -> None:
    order: list[str] = []

    def second() -> None:
        with writer.locked(str(tmp_path / "c.toml")):
            order.append("second")

    with writer.locked(str(tmp_path / "c.toml")):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.2)
        order.append("first")
    thread.join(5)
    assert order == ["first", "second"]


@pytest.mark.usefixtures("umask_000")
def test_directories_made_for_a_config_are_0755_parents_too_under_umask_000(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "containerd" / "conf.d" / "99-cdictk.toml"
    with writer.locked(str(config)):
        assert writer.commit(writer.read(str(config), follow_symlinks=False), "x = 1\n", dry_run=False)
    drop_in = tmp_path / "etc" / "crio" / "crio.conf.d" / "99-cdictk.conf"
    current = writer.read(str(drop_in), follow_symlinks=False)
    assert writer.commit(current, "y = 2\n", dry_run=False, backup=False)  # a drop-in, not locked
    made = ["etc", "etc/containerd", "etc/containerd/conf.d", "etc/crio", "etc/crio/crio.conf.d"]
    assert {name: oct((tmp_path / name).stat().st_mode & 0o7777) for name in made} == dict.fromkeys(
        made, "0o755"
    )
    assert (config.stat().st_mode & 0o7777, drop_in.stat().st_mode & 0o7777) == (0o644, 0o644)


def test_a_killed_runs_temp_file_is_removed_by_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("x = 1\n")
    stale = tmp_path / ".config.toml.0123456789ab.tmp"  # kill -9 between the write and the rename
    stale.write_text("x = ")
    assert not writer.commit(writer.read(str(path), follow_symlinks=False), "x = 1\n", dry_run=True)
    assert stale.exists()  # a dry run changes nothing
    assert not writer.commit(writer.read(str(path), follow_symlinks=False), "x = 1\n", dry_run=False)
    assert not stale.exists()
    stale.write_text("x = ")
    assert writer.commit(writer.read(str(path), follow_symlinks=False), "x = 2\n", dry_run=False)
    assert sorted(os.listdir(tmp_path)) == ["config.toml", "config.toml.cdictk.orig"]


@pytest.mark.root
def test_a_config_directory_a_user_could_change_is_refused(tmp_path: Path) -> None:
    """configure writes what engines run as root; never into a user's directory."""
    os.chmod(tmp_path, 0o755)
    etc = tmp_path / "containerd"
    etc.mkdir()
    (etc / "config.toml").write_text("version = 2\n")
    os.chown(etc, 12345, 12345)
    current = writer.read(str(etc / "config.toml"), follow_symlinks=False)
    with pytest.raises(CdictkError, match="owned by uid 12345"):
        writer.commit(current, "version = 3\n", dry_run=False)
    with (
        pytest.raises(CdictkError, match="owned by uid 12345"),
        writer.locked(str(etc / "conf.d" / "99.toml")),
    ):
        pass
    assert sorted(os.listdir(etc)) == ["config.toml"] and (etc / "config.toml").read_text() == "version = 2\n"
