"""Trust of a path: owner and mode of every name from it up to /, as written and where it leads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.trust import fd_problem, first_problem, owners_of_trust, path_problem, repairs, tree_problem

OTHER = 12345  # a uid nobody on the machine has: "another user"
ROOT_ONLY = frozenset({0})


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A root-owned 0755 directory; tmp_path's parents are root's, /tmp sticky."""
    if os.geteuid() != 0:
        pytest.skip("files of another owner need root (chown)")
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    return base


def spec(directory: Path, mode: int = 0o644) -> Path:
    path = directory / "nvidia.yaml"
    path.write_text("x")
    path.chmod(mode)
    return path


def test_a_root_file_in_root_directories_is_trusted(base: Path) -> None:
    assert path_problem(str(spec(base)), owners=ROOT_ONLY) is None


def test_a_file_of_another_user_is_not(base: Path) -> None:
    path = spec(base)
    os.chown(path, OTHER, OTHER)
    assert path_problem(str(path), owners=ROOT_ONLY) == f"{path}: owned by uid {OTHER}, not root"


@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646])
def test_a_file_others_can_write_is_not(base: Path, mode: int) -> None:
    path = spec(base, mode)
    assert path_problem(str(path), owners=ROOT_ONLY) == (
        f"{path}: writable by group or others (mode {mode:04o})"
    )


def test_a_parent_of_another_user_is_not(base: Path) -> None:
    inner = base / "cdi"
    inner.mkdir()
    path = spec(inner)
    os.chown(inner, OTHER, OTHER)
    assert path_problem(str(path), owners=ROOT_ONLY) == f"{inner}: owned by uid {OTHER}, not root"


def test_a_sticky_parent_is_fine_but_not_as_the_directory_read(base: Path) -> None:
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    inner = shared / "cdi"
    inner.mkdir(mode=0o755)
    assert path_problem(str(spec(inner)), owners=ROOT_ONLY) is None
    assert path_problem(str(shared), owners=ROOT_ONLY) == f"{shared}: writable by group or others (mode 1777)"
    assert path_problem(str(shared), owners=ROOT_ONLY, leaf_sticky_ok=True) is None
    shared.chmod(0o777)  # without the sticky bit anyone may rename inner away and put theirs there
    assert "writable by group or others (mode 0777)" in str(path_problem(str(spec(inner)), owners=ROOT_ONLY))


def test_a_root_symlink_is_judged_by_where_it_leads(base: Path) -> None:
    """The attack of issue 17: a link in a root spec dir to a 0666 file of a user."""
    home = base / "home"
    home.mkdir()
    target = spec(home, 0o666)
    os.chown(home, OTHER, OTHER)
    os.chown(target, OTHER, OTHER)
    link = base / "evil.yaml"
    link.symlink_to(target)
    assert path_problem(str(link), owners=ROOT_ONLY) == f"{target}: owned by uid {OTHER}, not root"
    os.chown(home, 0, 0)
    os.chown(target, 0, 0)
    target.chmod(0o644)
    assert path_problem(str(link), owners=ROOT_ONLY) is None
    os.lchown(link, OTHER, OTHER)  # a link of another user: they could make it lead elsewhere
    assert path_problem(str(link), owners=ROOT_ONLY) == f"{link}: owned by uid {OTHER}, not root"


def test_a_missing_path_is_a_problem(base: Path) -> None:
    assert path_problem(str(base / "gone"), owners=ROOT_ONLY) == f"{base / 'gone'}: No such file or directory"


def test_the_reading_user_is_trusted_too(base: Path) -> None:
    assert owners_of_trust() == {0, os.geteuid()}
    path = spec(base)
    os.chown(path, OTHER, OTHER)
    assert path_problem(str(path), owners=frozenset({0, OTHER})) is None


def test_seen_directories_are_remembered(base: Path) -> None:
    seen: dict[str, str] = {}
    assert path_problem(str(spec(base)), owners=ROOT_ONLY, seen=seen) is None
    assert seen[str(base)] == "" and seen["/"] == ""
    seen[str(base)] = "planted"  # a remembered answer is used, not asked again
    assert path_problem(str(base / "nvidia.yaml"), owners=ROOT_ONLY, seen=seen) == "planted"


def test_an_open_file_is_judged_by_fstat(base: Path) -> None:
    path = spec(base)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert fd_problem(fd, "entry", owners=ROOT_ONLY) is None
        os.fchmod(fd, 0o666)
        assert fd_problem(fd, "entry", owners=ROOT_ONLY) == "entry: writable by group or others (mode 0666)"
        os.fchmod(fd, 0o644)
        os.fchown(fd, OTHER, OTHER)
        assert fd_problem(fd, "entry", owners=ROOT_ONLY) == f"entry: owned by uid {OTHER}, not root"
    finally:
        os.close(fd)


def test_repairs_name_every_entry_at_fault(base: Path) -> None:
    inner = base / "cdi"
    inner.mkdir()
    inner.chmod(0o777)
    path = spec(inner, 0o666)
    os.chown(path, OTHER, OTHER)
    assert repairs(str(path), owners=ROOT_ONLY) == [
        ["chown", "root:", str(path)],
        ["chmod", "go-w", str(path)],
        ["chmod", "go-w", str(inner)],
    ]
    link = base / "link.yaml"
    link.symlink_to(path)
    os.lchown(link, OTHER, OTHER)
    assert repairs(str(link), owners=ROOT_ONLY)[0] == ["chown", "-h", "root:", str(link)]
    os.chown(path, 0, 0)
    path.chmod(0o644)
    inner.chmod(0o755)
    assert repairs(str(path), owners=ROOT_ONLY) == []


@pytest.fixture
def package(base: Path) -> Path:
    """A package as pip leaves it: root's directories 0755, files 0644, a __pycache__."""
    root = base / "cdictk"
    for directory in (root, root / "runtime", root / "runtime" / "__pycache__"):
        directory.mkdir(mode=0o755)
    for name in ("__init__.py", "runtime/__init__.py", "runtime/shim.py", "runtime/__pycache__/shim.pyc"):
        (root / name).write_text("")
        (root / name).chmod(0o644)
    return root


def test_a_tree_of_root_files_is_trusted(package: Path) -> None:
    assert tree_problem(str(package), owners=ROOT_ONLY) is None


@pytest.mark.parametrize("name", ["runtime/shim.py", "runtime/__pycache__/shim.pyc", "runtime/__pycache__"])
def test_any_entry_of_the_tree_others_can_write_is_not(package: Path, name: str) -> None:
    """Python reads sources, compiled files and whatever it finds in the directories."""
    (package / name).chmod(0o777)
    assert tree_problem(str(package), owners=ROOT_ONLY) == (
        f"{package / name}: writable by group or others (mode 0777)"
    )


def test_a_directory_of_another_user_in_the_tree_is_not(package: Path) -> None:
    os.chown(package / "runtime", OTHER, OTHER)  # they could swap shim.py for their own
    assert (
        tree_problem(str(package), owners=ROOT_ONLY)
        == f"{package / 'runtime'}: owned by uid {OTHER}, not root"
    )


def test_a_sticky_directory_in_the_tree_is_not(package: Path) -> None:
    """Anyone may add a module to a sticky directory: it is fine above a tree, never in it."""
    (package / "runtime").chmod(0o1777)
    assert "writable by group or others (mode 1777)" in str(tree_problem(str(package), owners=ROOT_ONLY))


def test_a_link_in_the_tree_is_walked_where_it_leads(package: Path, base: Path) -> None:
    elsewhere = base / "schemas"
    elsewhere.mkdir(mode=0o755)
    (elsewhere / "loop").symlink_to(package)  # walked once, not forever
    (package / "schemas").symlink_to(elsewhere)
    assert tree_problem(str(package), owners=ROOT_ONLY) is None
    loose = elsewhere / "spec.json"
    loose.write_text("{}")
    loose.chmod(0o666)
    assert tree_problem(str(package), owners=ROOT_ONLY) == f"{loose}: writable by group or others (mode 0666)"
    loose.unlink()
    os.lchown(package / "schemas", OTHER, OTHER)
    assert (
        tree_problem(str(package), owners=ROOT_ONLY)
        == f"{package / 'schemas'}: owned by uid {OTHER}, not root"
    )


def test_a_tree_is_checked_up_to_the_root_too(package: Path, base: Path) -> None:
    base.chmod(0o777)
    assert tree_problem(str(package), owners=ROOT_ONLY) == f"{base}: writable by group or others (mode 0777)"
    assert tree_problem(str(base / "gone"), owners=ROOT_ONLY) == f"{base / 'gone'}: No such file or directory"


def test_the_first_problem_of_paths_then_trees(package: Path, base: Path) -> None:
    file = spec(base)
    assert first_problem([str(file)], [str(package)], owners=ROOT_ONLY) is None
    (package / "runtime" / "shim.py").chmod(0o666)
    assert "shim.py: writable" in str(first_problem([str(file)], [str(package)], owners=ROOT_ONLY))
    file.chmod(0o666)
    assert first_problem([str(file)], [str(package)], owners=ROOT_ONLY) == (
        f"{file}: writable by group or others (mode 0666)"
    )
