"""Trust of a path: owner and mode of every name from it up to /, as written and where it leads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cdictk.startpath.trust import owners_of_trust, path_problem, paths_problem
from tests.owners import OTHER, ROOT_ONLY, plain_file

pytestmark = pytest.mark.root

if TYPE_CHECKING:
    from cdictk.startpath.trust import Seen


def test_a_root_file_in_root_directories_is_trusted(root_dir: Path) -> None:
    assert path_problem(str(plain_file(root_dir)), owners=ROOT_ONLY) is None


def test_a_file_of_another_user_is_not(root_dir: Path) -> None:
    path = plain_file(root_dir)
    os.chown(path, OTHER, OTHER)
    assert path_problem(str(path), owners=ROOT_ONLY) == f"{path}: owned by uid {OTHER}, not root"


@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646])
def test_a_file_others_can_write_is_not(root_dir: Path, mode: int) -> None:
    path = plain_file(root_dir, mode)
    assert path_problem(str(path), owners=ROOT_ONLY) == (
        f"{path}: writable by group or others (mode {mode:04o})"
    )


def test_a_parent_of_another_user_is_not(root_dir: Path) -> None:
    inner = root_dir / "cdi"
    inner.mkdir()
    path = plain_file(inner)
    os.chown(inner, OTHER, OTHER)
    assert path_problem(str(path), owners=ROOT_ONLY) == f"{inner}: owned by uid {OTHER}, not root"


def test_a_sticky_parent_is_fine_but_not_as_the_directory_read(root_dir: Path) -> None:
    shared = root_dir / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    inner = shared / "cdi"
    inner.mkdir(mode=0o755)
    assert path_problem(str(plain_file(inner)), owners=ROOT_ONLY) is None
    assert path_problem(str(shared), owners=ROOT_ONLY) == f"{shared}: writable by group or others (mode 1777)"
    assert path_problem(str(shared), owners=ROOT_ONLY, leaf_sticky_ok=True) is None
    shared.chmod(0o777)  # without the sticky bit anyone may rename inner away and put theirs there
    assert "writable by group or others (mode 0777)" in str(
        path_problem(str(plain_file(inner)), owners=ROOT_ONLY)
    )


def test_a_root_symlink_is_judged_by_where_it_leads(root_dir: Path) -> None:
    """A planted spec: a link in a root spec dir to a 0666 file of a user."""
    home = root_dir / "home"
    home.mkdir()
    target = plain_file(home, 0o666)
    os.chown(home, OTHER, OTHER)
    os.chown(target, OTHER, OTHER)
    link = root_dir / "evil.yaml"
    link.symlink_to(target)
    assert path_problem(str(link), owners=ROOT_ONLY) == f"{home}: owned by uid {OTHER}, not root"
    os.chown(home, 0, 0)
    assert path_problem(str(link), owners=ROOT_ONLY) == f"{target}: owned by uid {OTHER}, not root"
    os.chown(target, 0, 0)
    target.chmod(0o644)
    assert path_problem(str(link), owners=ROOT_ONLY) is None
    os.lchown(link, OTHER, OTHER)  # a link of another user: they could make it lead elsewhere
    assert path_problem(str(link), owners=ROOT_ONLY) == f"{link}: owned by uid {OTHER}, not root"


def test_a_missing_path_is_a_problem(root_dir: Path) -> None:
    assert (
        path_problem(str(root_dir / "gone"), owners=ROOT_ONLY)
        == f"{root_dir / 'gone'}: No such file or directory"
    )


def test_the_reading_user_is_trusted_too(root_dir: Path) -> None:
    assert owners_of_trust() == {0, os.geteuid()}
    path = plain_file(root_dir)
    os.chown(path, OTHER, OTHER)
    assert path_problem(str(path), owners=frozenset({0, OTHER})) is None


def test_seen_directories_are_remembered(root_dir: Path, tmp_path: Path) -> None:
    seen: Seen = {}
    assert path_problem(str(plain_file(root_dir)), owners=ROOT_ONLY, seen=seen) is None
    assert seen == {str(root_dir): str(root_dir)}
    other = tmp_path / "other"
    other.mkdir()
    plain_file(other, 0o666)
    seen[str(root_dir)] = str(other)  # a remembered answer is used, not asked again
    assert path_problem(str(root_dir / "nvidia.yaml"), owners=ROOT_ONLY, seen=seen) == (
        f"{other}/nvidia.yaml: writable by group or others (mode 0666)"
    )


def test_a_problem_above_is_remembered_for_the_directories_below(root_dir: Path) -> None:
    """A directory remembered as fine must not hide a directory above it that is not."""
    inner = root_dir / "a" / "b"
    inner.mkdir(parents=True)
    root_dir.chmod(0o777)
    seen: Seen = {}
    why = f"{root_dir}: writable by group or others (mode 0777)"
    assert path_problem(str(plain_file(inner)), owners=ROOT_ONLY, seen=seen) == why
    (inner / "other.yaml").write_text("x")
    assert path_problem(str(inner / "other.yaml"), owners=ROOT_ONLY, seen=seen) == why


def test_a_link_on_the_way_is_remembered_so_where_it_leads_is_checked(root_dir: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    plain_file(theirs)
    (root_dir / "via").symlink_to(theirs)
    seen: Seen = {}
    for _ in range(2):  # the second time from what was remembered
        assert path_problem(str(root_dir / "via" / "nvidia.yaml"), owners=ROOT_ONLY, seen=seen) == (
            f"{theirs}: owned by uid {OTHER}, not root"
        )


def test_the_first_of_several_paths_with_a_problem(root_dir: Path) -> None:
    good, bad = plain_file(root_dir), root_dir / "bad.yaml"
    bad.write_text("x")
    bad.chmod(0o666)
    assert paths_problem([str(good)], owners=ROOT_ONLY) is None
    assert paths_problem([str(good), str(bad)], owners=ROOT_ONLY) == (
        f"{bad}: writable by group or others (mode 0666)"
    )


def test_the_directories_between_two_links_are_checked(root_dir: Path) -> None:
    """``out -> userdir/hop -> target``: the way the kernel walks crosses ``userdir``, a user's."""
    (root_dir / "target").mkdir()
    (root_dir / "userdir").mkdir()
    (root_dir / "userdir" / "hop").symlink_to(root_dir / "target")
    os.chown(root_dir / "userdir", OTHER, OTHER)
    (root_dir / "out").symlink_to(root_dir / "userdir" / "hop")
    assert path_problem(str(root_dir / "out"), owners=ROOT_ONLY) == (
        f"{root_dir / 'userdir'}: owned by uid {OTHER}, not root"
    )


def test_dot_dot_goes_up_from_where_a_link_led(root_dir: Path) -> None:
    (root_dir / "x" / "victim").mkdir(parents=True)
    (root_dir / "elsewhere" / "a").mkdir(parents=True)
    (root_dir / "elsewhere" / "victim").mkdir()
    (root_dir / "x" / "ul").symlink_to(root_dir / "elsewhere" / "a")
    path = f"{root_dir}/x/ul/../victim"
    assert path_problem(path, owners=ROOT_ONLY) is None
    os.chown(root_dir / "elsewhere" / "victim", OTHER, OTHER)  # not x/victim, which the text names
    assert (
        path_problem(path, owners=ROOT_ONLY) == f"{root_dir}/elsewhere/victim: owned by uid {OTHER}, not root"
    )
    assert path_problem(f"{root_dir}/x/victim/../../x", owners=ROOT_ONLY) is None
    plain_file(root_dir / "x")
    assert path_problem(f"{root_dir}/x/nvidia.yaml/../victim", owners=ROOT_ONLY) == (
        f"{root_dir}/x/nvidia.yaml/..: Not a directory"
    )


def test_a_relative_path_is_walked_from_the_working_directory(
    root_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root_dir / "d").mkdir()
    monkeypatch.chdir(root_dir / "d")
    assert path_problem("../d", owners=ROOT_ONLY) is None
    os.chown(root_dir / "d", OTHER, OTHER)
    assert path_problem(".", owners=ROOT_ONLY) == f"{root_dir}/d: owned by uid {OTHER}, not root"
