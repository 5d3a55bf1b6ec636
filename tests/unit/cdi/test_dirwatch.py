import os
import shutil
import sys
from pathlib import Path

import pytest

from cdictk.cdi import dirwatch
from cdictk.cdi.dirwatch import DirWatch


def test_each_kind_of_change_is_seen_once(tmp_path: Path) -> None:
    watch = DirWatch([str(tmp_path)])
    assert watch.active and not watch.changed()
    spec = tmp_path / "a.json"
    spec.write_text("{}")  # created
    assert watch.changed() and not watch.changed()
    os.rename(spec, tmp_path / "b.json")  # renamed, as every atomic writer does
    assert watch.changed() and not watch.changed()
    (tmp_path / "b.json").chmod(0o666)  # trust may change without the text
    assert watch.changed() and not watch.changed()
    (tmp_path / "b.json").unlink()
    assert watch.changed() and not watch.changed()
    watch.close()


def test_a_missing_directory_is_watched_once_it_appears_and_again_after_removal(tmp_path: Path) -> None:
    directory = tmp_path / "cdi"
    watch = DirWatch([str(directory)])
    assert not watch.changed()
    directory.mkdir()
    assert watch.changed()
    (directory / "a.yaml").write_text("")
    assert watch.changed()
    shutil.rmtree(directory)
    assert watch.changed()
    directory.mkdir()
    assert watch.changed()
    (directory / "b.yaml").write_text("")
    assert watch.changed() and not watch.changed()
    watch.close()


def test_without_inotify_every_look_is_a_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_instance_left(_flags: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(dirwatch, "inotify_init1", no_instance_left)
    watch = DirWatch([str(tmp_path)])
    assert not watch.active
    assert watch.changed() and watch.changed()


def test_inotify_reports_a_file_made_in_a_watched_directory(tmp_path: Path) -> None:
    fd = dirwatch.inotify_init1(dirwatch.IN_NONBLOCK | dirwatch.IN_CLOEXEC)
    try:
        watch = dirwatch.inotify_add_watch(fd, str(tmp_path), dirwatch.IN_CREATE | dirwatch.IN_ONLYDIR)
        assert dirwatch.inotify_add_watch(fd, str(tmp_path), dirwatch.IN_CREATE) == watch
        (tmp_path / "spec.yaml").write_text("")
        event = os.read(fd, 4096)
        assert int.from_bytes(event[:4], sys.byteorder) == watch
        assert event[16:].rstrip(b"\0") == b"spec.yaml"
        with pytest.raises(NotADirectoryError):
            dirwatch.inotify_add_watch(fd, str(tmp_path / "spec.yaml"), dirwatch.IN_ONLYDIR)
    finally:
        os.close(fd)
