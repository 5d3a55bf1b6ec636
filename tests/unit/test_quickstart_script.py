"""./quickstart, the README's two commands: what it says when it cannot go on.

Installing with apt-get is shown by the slow test (tests/e2e/test_quickstart.py) on a pristine Debian;
here a machine that lacks gcc is faked with a PATH that has no gcc on it, and the script runs as a
user who may not install anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.readme import PROJECT

QUICKSTART = PROJECT / "quickstart"
# What the script runs besides gcc, by name; each found here is linked into the fake PATH.
TOOLS = ("bash", "env", "id", "dirname", "grep", "tail", "mktemp", "rm", "make", "apt-get", "dpkg-query")


@pytest.fixture
def world_readable_dir() -> Iterator[Path]:
    """pytest's tmp_path is root's alone; the script runs as nobody."""
    directory = Path(tempfile.mkdtemp(prefix="cdictk-quickstart-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def run_as_nobody(command: list[str], path: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv") or "setpriv"
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, *command],
        env={"PATH": path, "HOME": str(cwd)},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_usage() -> None:
    missing = subprocess.run([str(QUICKSTART)], capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and missing.stderr.startswith("usage: ./quickstart demo|test|setup|TARGET")
    shown = subprocess.run([str(QUICKSTART), "--help"], capture_output=True, text=True, check=False)
    assert shown.returncode == 0 and "  test   the whole test suite" in shown.stdout


def test_a_missing_compiler_is_one_line_naming_the_packages(world_readable_dir: Path) -> None:
    if shutil.which("setpriv") is None and os.geteuid() == 0:
        pytest.skip("setpriv (util-linux) is needed to run the script as a user who cannot install")
    project = world_readable_dir / "clone"
    project.mkdir()
    shutil.copy2(QUICKSTART, project / "quickstart")
    bin_dir = world_readable_dir / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is not None:
            (bin_dir / tool).symlink_to(found)
    if os.access("/usr/bin/python3", os.X_OK):
        (bin_dir / "python3").symlink_to("/usr/bin/python3")

    result = run_as_nobody(["./quickstart", "test"], str(bin_dir), project)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("quickstart: missing: ")
    assert (
        "gcc (a C compiler for the fake node's driver stubs), libc6-dev (the C library headers)"
        in result.stderr
    )
    if shutil.which("apt-get") is not None:
        assert "; as root: apt-get install " in result.stderr and " gcc libc6-dev" in result.stderr
    assert not (project / ".venv").exists()  # it stopped before making anything


def test_the_demo_as_a_user_says_it_needs_root_before_anything_else(world_readable_dir: Path) -> None:
    shutil.copy2(QUICKSTART, world_readable_dir / "quickstart")
    result = run_as_nobody(
        ["./quickstart", "demo"], os.environ.get("PATH", "/usr/bin:/bin"), world_readable_dir
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "quickstart: the demo needs root: its fake device nodes are made with mknod "
        "(run: sudo ./quickstart demo)\n"
    )


@pytest.mark.root
def test_a_directory_that_is_not_a_venv_is_never_cleared(tmp_path: Path) -> None:
    """VENV=DIR naming a directory with other files in it: `python3 -m venv --clear` would empty it."""
    project = tmp_path / "clone"
    project.mkdir()
    shutil.copy2(QUICKSTART, project / "quickstart")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in (*TOOLS, "gcc", "ls"):
        found = shutil.which(tool)
        if found is not None and tool not in ("apt-get", "dpkg-query"):
            (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine\n")

    result = subprocess.run(
        ["./quickstart", "setup"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "CDICTK_VENV": str(precious)},
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"quickstart: {precious} exists and is not a virtual environment; remove it or name another one\n"
    )
    assert (precious / "keep.txt").read_text() == "mine\n"
