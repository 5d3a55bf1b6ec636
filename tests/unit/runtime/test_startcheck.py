"""The check a launcher runs before it imports cdictk: cdictk/startpath/trust.py, installed beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.runtime.startcheck import CHECKER, COMPILE, check_lines, checker_text, main_lines
from cdictk.startpath import trust
from tests.rootmarker import root_only

ROOT_ONLY = frozenset({0})


def install_checker(directory: Path) -> str:
    """What the install does beside the launchers (here with this Python): the checker and its
    bytecode; the cache tag."""
    directory.mkdir(exist_ok=True)
    (directory / CHECKER).write_text(checker_text())
    (directory / CHECKER).chmod(0o644)
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", COMPILE, str(directory / CHECKER)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture
@root_only
def tree(tmp_path: Path) -> Path:
    """A package the launcher imports from: ``cdictk.shim`` (run), ``cdictk.other`` (never imported)."""
    package = tmp_path / "site" / "cdictk"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "shim.py").write_text("def main() -> int:\n    print('started')\n    return 0\n")
    (package / "other.py").write_text("")
    subprocess.run([sys.executable, "-I", "-S", "-m", "compileall", "-q", str(package)], check=True)
    return package


def script(path: Path, paths: list[str], site: Path) -> Path:
    """A launcher of ``cdictk.shim`` from ``site``, with the start check of ``paths``."""
    tag = install_checker(path.parent)
    path.write_text(
        check_lines(tag, str(path.parent), paths, ROOT_ONLY)
        + f"sys.path += [{str(site)!r}]\n"
        + main_lines("cdictk.shim")
    )
    return path


def start(launcher: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-S", launcher], capture_output=True, text=True, check=False)


def test_the_checker_is_trusts_source_as_it_is(tmp_path: Path) -> None:
    text = checker_text()
    assert text.endswith(Path(trust.__file__).read_text())
    header = text.removesuffix(Path(trust.__file__).read_text())
    assert (
        all(line.startswith("# ") for line in header.splitlines()) and "cdictk/startpath/trust.py" in header
    )
    assert install_checker(tmp_path) == sys.implementation.cache_tag


@pytest.mark.root
def test_nothing_loosened_runs_on(tree: Path, tmp_path: Path) -> None:
    launcher = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], tree.parent)
    assert (start(launcher).returncode, start(launcher).stdout, start(launcher).stderr) == (
        0,
        "started\n",
        "",
    )


@pytest.mark.root
def test_the_names_it_defines_stay_in_the_launchers_main(tree: Path, tmp_path: Path) -> None:
    (tree / "shim.py").write_text(
        "import sys\n"
        "def main() -> int:\n"
        "    print(sorted(m for m in sys.modules if m.startswith('cdictk')), sys.path[0] != sys.argv[0])\n"
        "    return 0\n"
    )
    launcher = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], tree.parent)
    assert start(launcher).stdout == "['cdictk', 'cdictk.shim', 'cdictk_trust'] True\n"


@pytest.mark.root
@pytest.mark.parametrize(
    "name", ["shim.py", f"__pycache__/shim.{sys.implementation.cache_tag}.pyc", "__pycache__", "."]
)
def test_a_loosened_module_is_refused_before_python_reads_it(tree: Path, tmp_path: Path, name: str) -> None:
    launcher = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], tree.parent)
    loose = tree / name
    loose.chmod(0o666 if loose.is_file() else 0o777)
    result = start(launcher)
    mode = "0666" if loose.is_file() else "0777"
    module = "cdictk" if name in ("__pycache__", ".") else "cdictk.shim"  # the package's own files first
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{launcher}: error: {os.path.normpath(loose)}: writable by group or others (mode {mode}): "
        f"someone other than root could change it; {module} not loaded\n"
    )


@pytest.mark.root
def test_a_module_linked_to_a_file_of_another_user_is_refused(tree: Path, tmp_path: Path) -> None:
    launcher = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], tree.parent)
    theirs = tmp_path / "theirs.py"
    theirs.write_text("import os; os.system('id')\n")
    os.chown(theirs, 12345, 12345)
    (tree / "shim.py").unlink()
    (tree / "shim.py").symlink_to(theirs)
    for pyc in (tree / "__pycache__").glob("shim.*"):
        pyc.unlink()
    result = start(launcher)
    assert result.returncode == 1 and f"{theirs}: owned by uid 12345, not root" in result.stderr


@pytest.mark.root
def test_only_what_is_imported_is_looked_at(tree: Path, tmp_path: Path) -> None:
    launcher = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], tree.parent)
    (tree / "other.py").chmod(0o666)  # never imported: nothing Python runs is at stake
    assert start(launcher).stdout == "started\n"


@pytest.mark.root
def test_the_paths_are_checked_before_anything_is_imported(tree: Path, tmp_path: Path) -> None:
    launcher = script(tmp_path / "launcher", [str(tree.parent)], tree.parent)
    os.chown(tree / "shim.py", 12345, 12345)
    tree.parent.chmod(0o775)
    result = start(launcher)
    assert result.returncode == 1
    assert result.stderr == (
        f"{launcher}: error: {tree.parent}: writable by group or others (mode 0775): "
        "someone other than root could change what runs as root; cdictk not started\n"
    )


@pytest.mark.root
def test_a_loosened_checker_bytecode_stops_the_start(tree: Path, tmp_path: Path) -> None:
    """The checker's checked-hash .pyc: Python runs it whenever the source hash in it matches, so
    whoever could write it could make their code pass for the checker. Before: its directory was
    checked, the file never, and a 0666 .pyc started cdictk."""
    launcher = script(tmp_path / "launcher", [sys.executable, str(tree.parent)], tree.parent)
    pyc = tmp_path / "__pycache__" / f"cdictk_trust.{sys.implementation.cache_tag}.pyc"
    pyc.chmod(0o666)
    result = start(launcher)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{launcher}: error: {pyc}: writable by group or others (mode 0666): "
        "someone other than root could change what runs as root; cdictk not started\n"
    )
