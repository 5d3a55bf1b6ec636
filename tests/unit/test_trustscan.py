"""The checks off the start path: a whole package tree, paths then trees, and the repairs info prints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.trustscan import first_problem, repairs, tree_problem
from tests.owners import OTHER, ROOT_ONLY, plain_file

pytestmark = pytest.mark.root


def test_repairs_name_every_entry_at_fault(root_dir: Path) -> None:
    inner = root_dir / "cdi"
    inner.mkdir()
    inner.chmod(0o777)
    path = plain_file(inner, 0o666)
    os.chown(path, OTHER, OTHER)
    assert repairs(str(path), owners=ROOT_ONLY) == [
        ["chmod", "go-w", str(inner)],
        ["chown", "root:", str(path)],
        ["chmod", "go-w", str(path)],
    ]
    link = root_dir / "link.yaml"
    link.symlink_to(path)
    os.lchown(link, OTHER, OTHER)
    assert repairs(str(link), owners=ROOT_ONLY) == [
        ["chown", "-h", "root:", str(link)],
        ["chmod", "go-w", str(inner)],
        ["chown", "root:", str(path)],
        ["chmod", "go-w", str(path)],
    ]
    os.chown(path, 0, 0)
    path.chmod(0o644)
    inner.chmod(0o755)
    assert repairs(str(path), owners=ROOT_ONLY) == []


@pytest.fixture
def package(root_dir: Path) -> Path:
    """A package as pip leaves it: root's directories 0755, files 0644, a __pycache__."""
    root = root_dir / "cdictk"
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


def test_a_link_in_the_tree_is_walked_where_it_leads(package: Path, root_dir: Path) -> None:
    elsewhere = root_dir / "schemas"
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


def test_a_tree_is_checked_up_to_the_root_too(package: Path, root_dir: Path) -> None:
    root_dir.chmod(0o777)
    assert (
        tree_problem(str(package), owners=ROOT_ONLY) == f"{root_dir}: writable by group or others (mode 0777)"
    )
    root_dir.chmod(0o755)
    assert (
        tree_problem(str(root_dir / "gone"), owners=ROOT_ONLY)
        == f"{root_dir / 'gone'}: No such file or directory"
    )


def test_the_first_problem_of_paths_then_trees(package: Path, root_dir: Path) -> None:
    file = plain_file(root_dir)
    assert first_problem([str(file)], [str(package)], owners=ROOT_ONLY) is None
    (package / "runtime" / "shim.py").chmod(0o666)
    assert "shim.py: writable" in str(first_problem([str(file)], [str(package)], owners=ROOT_ONLY))
    file.chmod(0o666)
    assert first_problem([str(file)], [str(package)], owners=ROOT_ONLY) == (
        f"{file}: writable by group or others (mode 0666)"
    )
