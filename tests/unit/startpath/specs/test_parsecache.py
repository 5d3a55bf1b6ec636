"""The runtime shim's parse cache: an entry is used only when its key matches and nobody else could write it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.startpath.specs.parsecache import DEFAULT_DIR, ParseCache, entry_name


def test_an_entry_is_returned_for_its_own_key_only(tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "c"))
    cache.store("e", ["a", 1], {"x": [1, "é"]})
    assert cache.load("e", ["a", 1]) == {"x": [1, "é"]}
    assert cache.load("e", ["a", 2]) is None
    assert cache.load("other", ["a", 1]) is None
    assert os.stat(tmp_path / "c").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "c" / "e.json").st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path / "c") == ["e.json"]  # no temporary file left


def test_no_directory_caches_nothing(tmp_path: Path) -> None:
    cache = ParseCache(None)
    cache.store("e", [1], 2)
    assert cache.load("e", [1]) is None
    assert ParseCache("").directory is None


@pytest.mark.parametrize("mode", [0o777, 0o720, 0o702])
def test_a_directory_others_can_write_is_not_trusted(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "c"
    cache = ParseCache(str(directory))
    cache.store("e", [1], "good")
    directory.chmod(mode)
    assert cache.load("e", [1]) is None
    cache.store("f", [1], "new")  # nor written into
    assert not (directory / "f.json").exists()


def test_an_entry_others_can_write_or_own_is_not_trusted(tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path))
    tmp_path.chmod(0o700)
    cache.store("e", [1], "good")
    entry = tmp_path / "e.json"
    entry.chmod(0o620)
    assert cache.load("e", [1]) is None
    entry.chmod(0o600)
    assert cache.load("e", [1]) == "good"
    if os.geteuid() == 0:
        os.chown(entry, 4242, 4242)
        assert cache.load("e", [1]) is None


def test_links_torn_files_and_fifos_are_misses(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    cache = ParseCache(str(tmp_path))
    cache.store("real", [1], "good")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert cache.load("link", [1]) is None
    data = (tmp_path / "real.json").read_bytes()
    (tmp_path / "real.json").write_bytes(data[: len(data) // 2])
    assert cache.load("real", [1]) is None
    (tmp_path / "dup.json").write_text('{"key": [1], "key": [2], "value": 3}')
    assert cache.load("dup", [1]) is None and cache.load("dup", [2]) is None
    os.mkfifo(tmp_path / "fifo.json", 0o600)
    assert cache.load("fifo", [1]) is None  # and it did not block
    (tmp_path / "list.json").write_text("[1]")
    assert cache.load("list", [1]) is None


def test_a_directory_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    real = tmp_path / "real"
    ParseCache(str(real)).store("e", [1], "good")
    (tmp_path / "link").symlink_to(real)
    assert ParseCache(str(tmp_path / "link")).load("e", [1]) is None


def swap_for_a_link_after_the_check(monkeypatch: pytest.MonkeyPatch, directory: Path, target: Path) -> None:
    """The race a user who could rename the directory would run: as soon as the cache looks at
    anything but the directory itself, the directory is moved aside and a link to ``target`` takes
    its name (renameat2's exchange, in one step)."""
    real_open = os.open
    swapped = False

    def open_after_swap(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        nonlocal swapped
        if not swapped and path != str(directory):
            swapped = True
            directory.rename(directory.with_name("moved-aside"))
            directory.symlink_to(target)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_after_swap)


def test_a_directory_swapped_for_a_link_after_the_check_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, target = tmp_path / "c", tmp_path / "chosen-by-the-user"
    cache = ParseCache(str(directory))
    cache.store("e", [1], "good")
    target.mkdir(mode=0o700)
    swap_for_a_link_after_the_check(monkeypatch, directory, target)
    cache.store("f", [1], "new")
    assert os.listdir(target) == []
    assert sorted(os.listdir(tmp_path / "moved-aside")) == ["e.json", "f.json"]


def test_a_directory_swapped_for_a_link_after_the_check_is_not_read_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, target = tmp_path / "c", tmp_path / "chosen-by-the-user"
    ParseCache(str(directory)).store("e", [1], "good")
    ParseCache(str(target)).store("e", [1], "planted")  # root's file, in a place of the user's choosing
    swap_for_a_link_after_the_check(monkeypatch, directory, target)
    assert ParseCache(str(directory)).load("e", [1]) == "good"


@pytest.mark.root
def test_a_directory_under_a_parent_someone_else_owns_is_not_used(tmp_path: Path) -> None:
    parent = tmp_path / "user"
    cache = ParseCache(str(parent / "c"))
    cache.store("e", [1], "good")
    os.chown(parent, 12345, 12345)  # the user could rename c away and put another in its place
    assert cache.load("e", [1]) is None
    cache.store("f", [1], "new")
    assert os.listdir(parent / "c") == ["e.json"]
    fresh = ParseCache(str(parent / "new" / "deeper"))
    fresh.store("e", [1], "x")
    assert not (parent / "new").exists()  # nothing is made where the user could point elsewhere


def test_a_directory_under_a_sticky_world_writable_parent_is_used(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: nobody but root may rename root's entries there
    cache = ParseCache(str(shared / "c"))
    cache.store("e", [1], "good")
    assert cache.load("e", [1]) == "good"


def test_what_cannot_be_stored_is_skipped_quietly(tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "c"))
    cache.store("e", [1], {1j: "not JSON"})
    cache.store("n", [1], float("nan"))
    blocked = ParseCache(str(tmp_path / "file" / "c"))
    (tmp_path / "file").write_text("")
    blocked.store("e", [1], "x")  # the directory cannot be made
    assert not (tmp_path / "c").exists() or os.listdir(tmp_path / "c") == []


def test_the_directory_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDICTK_CACHE_DIR", "/somewhere")
    assert ParseCache.from_environment().directory == "/somewhere"
    monkeypatch.setenv("CDICTK_CACHE_DIR", "")
    assert ParseCache.from_environment().directory is None
    monkeypatch.setenv("CDICTK_CACHE_DIR", "relative")
    assert ParseCache.from_environment().directory is None
    monkeypatch.delenv("CDICTK_CACHE_DIR")
    assert ParseCache.from_environment().directory == (DEFAULT_DIR if os.geteuid() == 0 else None)


def test_entry_names_are_stable_and_spread() -> None:
    assert entry_name("settings", "/etc/cdictk/config.toml") == entry_name(
        "settings", "/etc/cdictk/config.toml"
    )
    assert entry_name("settings", "/a") != entry_name("settings", "/b")
    assert entry_name("settings", "/a").startswith("settings-") and len(entry_name("x", "\udcff" * 500)) == 18
