"""The check a launcher runs before it imports cdictk: cdictk/trust.py's code, compiled into its text."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk import trust
from cdictk.runtime.startcheck import COMPILE, check_lines, trust_source

ROOT_ONLY = frozenset({0})


def compiled() -> tuple[str, bytes]:
    """What the install asks of the launcher's Python (here this one)."""
    answer = subprocess.run(
        [sys.executable, "-I", "-S", "-c", COMPILE],
        input=trust_source().encode(),
        capture_output=True,
        check=True,
    ).stdout
    tag, _, code = answer.partition(b"\0")
    return tag.decode(), code


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the files are root's in a launcher's world: run as root")
    package = tmp_path / "site" / "cdictk"
    (package / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "shim.py", "__pycache__/shim.cpython-311.pyc"):
        (package / name).write_text("")
    return package


def script(path: Path, paths: list[str], trees: list[str]) -> Path:
    tag, code = compiled()
    path.write_text(check_lines(tag, code, paths, trees, ROOT_ONLY) + "print('started')\n")
    return path


def test_the_code_is_trusts_compiled_by_the_launchers_python_without_docstrings() -> None:
    tag, code = compiled()
    assert tag == sys.implementation.cache_tag
    assert trust_source() == Path(trust.__file__).read_text()
    carried = marshal.loads(code)  # noqa: S302 (what the launcher loads, made just above)
    assert carried == compile(trust_source(), "cdictk/trust.py", "exec", optimize=2)


def test_nothing_loosened_runs_on(tree: Path, tmp_path: Path) -> None:
    checked = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], [str(tree)])
    result = subprocess.run(
        [sys.executable, "-I", "-S", checked], capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "started\n", "")


@pytest.mark.parametrize("name", ["shim.py", "__pycache__/shim.cpython-311.pyc", "__pycache__", "."])
def test_a_loosened_entry_stops_it_with_one_line(tree: Path, tmp_path: Path, name: str) -> None:
    checked = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], [str(tree)])
    loose = tree / name
    loose.chmod(0o666 if loose.is_file() else 0o777)
    result = subprocess.run(
        [sys.executable, "-I", "-S", checked], capture_output=True, text=True, check=False
    )
    mode = "0666" if loose.is_file() else "0777"
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{checked}: error: {os.path.normpath(loose)}: writable by group or others (mode {mode}): "
        "someone other than root could change what runs as root; cdictk not started\n"
    )


def test_a_path_is_checked_before_any_tree(tree: Path, tmp_path: Path) -> None:
    checked = script(tmp_path / "launcher", [str(tree.parent)], [str(tree)])
    os.chown(tree / "shim.py", 12345, 12345)
    tree.parent.chmod(0o775)
    result = subprocess.run(
        [sys.executable, "-I", "-S", checked], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"{checked}: error: {tree.parent}: writable by group or others (mode 0775)"
    )
