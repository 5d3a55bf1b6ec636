import os
import stat
from pathlib import Path

import pytest

from cdictk.errors import CdictkError
from cdictk.fsutil import atomic_write, read_capped


def test_new_file_gets_the_given_mode(tmp_path: Path) -> None:
    target = tmp_path / "spec.yaml"
    atomic_write(str(target), b"data", mode=0o600)
    assert target.read_bytes() == b"data"
    assert target.stat().st_mode & 0o7777 == 0o600
    atomic_write(str(tmp_path / "default"), b"x")
    assert (tmp_path / "default").stat().st_mode & 0o7777 == 0o644


def test_replacing_keeps_mode_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_text("old")
    target.chmod(0o640)
    inode = target.stat().st_ino
    atomic_write(str(target), b"new" * 100000)
    assert target.read_bytes() == b"new" * 100000
    assert target.stat().st_mode & 0o7777 == 0o640
    assert target.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert os.listdir(tmp_path) == ["config.json"]


def test_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CdictkError, match="is a symlink; refusing to replace it"):
        atomic_write(str(tmp_path / "link"), b"x")
    assert (tmp_path / "real").read_text() == "keep"
    assert (tmp_path / "link").is_symlink()


def test_directory_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match="not a regular file"):
        atomic_write(str(tmp_path), b"x")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match="cannot create a temporary file"):
        atomic_write(str(tmp_path / "none" / "f"), b"x")


def test_failed_rename_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "config.json"
    target.write_text("old")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(CdictkError, match=r"config\.json: cannot write: No space left on device"):
        atomic_write(str(target), b"new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["config.json"]


def test_keep_mode_false_sets_the_given_mode(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("old")
    os.chmod(path, 0o600)
    atomic_write(str(path), b"new", mode=0o644, keep_mode=False)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_file_written_with_its_own_mode_belongs_to_the_writer(tmp_path: Path) -> None:
    """A spec (hooks run as root) must not go to whoever planted the file it replaces."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the old file another owner")
    path = tmp_path / "nvidia.yaml"
    path.write_text("planted")
    os.chown(path, 65534, 65534)
    atomic_write(str(path), b"spec", mode=0o644, keep_mode=False)
    assert (path.stat().st_uid, path.stat().st_gid) == (0, 0)
    os.chown(path, 65534, 65534)
    atomic_write(str(path), b"config", keep_mode=True)  # an edited config keeps its owner
    assert path.stat().st_uid == 65534


def test_read_capped(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_capped(str(path), 10) == b"x" * 10
    with pytest.raises(CdictkError, match="file is 10 bytes, over the 9-byte limit"):
        read_capped(str(path), 9)
    with pytest.raises(CdictkError, match="No such file or directory"):
        read_capped(str(tmp_path / "missing"), 10)
    with pytest.raises(CdictkError, match="not a regular file"):
        read_capped(str(tmp_path), 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(CdictkError, match="not a regular file"):
        read_capped(str(tmp_path / "fifo"), 10)


def test_read_capped_stops_at_the_cap_for_files_without_a_size() -> None:
    # /proc files report size 0 but have content: the cap still applies while reading.
    with pytest.raises(CdictkError, match="over the 4-byte limit"):
        read_capped("/proc/self/status", 4)
