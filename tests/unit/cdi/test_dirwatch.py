import os
import shutil
from pathlib import Path

import pytest

from cdictk.cdi.dirwatch import DirWatch
from cdictk.startpath.helpers import syscalls


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

    monkeypatch.setattr(syscalls, "inotify_init1", no_instance_left)
    watch = DirWatch([str(tmp_path)])
    assert not watch.active
    assert watch.changed() and watch.changed()
