"""./quickstart, the README's two commands: what it says when it cannot go on.

Installing with apt-get is shown by the slow test (tests/e2e/test_quickstart.py) on a pristine Debian;
here a machine that lacks gcc is faked with a PATH that has no gcc on it, and the script runs as a
user who may not install anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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

    result = run_as_nobody(["./quickstart", "demo"], str(bin_dir), project)
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
