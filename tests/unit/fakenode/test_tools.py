"""What building a fake node needs: each missing tool is one line that says how to get it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO
from tests.fakenode import tools
from tests.fakenode.tools import MissingTool, NodeTools, find_tools, node_tools

PROJECT = REPO


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """find_tools' later checks, whoever runs the tests; mknod itself is faked where it matters."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.mark.root
def test_everything_here_is_found() -> None:
    found = find_tools()
    assert isinstance(found, NodeTools), found
    assert os.path.isabs(found.gcc) and os.path.isabs(found.ldconfig)


def test_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert find_tools() == "needs root: its device nodes are made with mknod (run it as root)"


def test_no_gcc(as_root: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_tools() == (
        "gcc not found: the driver stubs are compiled with it (as root: apt-get install gcc libc6-dev)"
    )


def test_no_c_headers(as_root: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """gcc without libc6-dev: the preprocessor cannot find <dlfcn.h>."""
    executable(
        tmp_path / "gcc", "#!/bin/sh\necho 'fatal error: dlfcn.h: No such file or directory' >&2\nexit 1\n"
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_tools() == (
        "gcc finds no C library headers (<dlfcn.h>, <stdio.h>): as root: apt-get install libc6-dev"
    )


def test_no_ldconfig(as_root: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    executable(tmp_path / "gcc", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: os.path.basename(path) != "ldconfig" and real_access(path, mode)
    )
    assert find_tools() == (
        "ldconfig not found: the node's ld.so.cache is written with ldconfig -r (apt-get install libc-bin)"
    )


def test_no_mknod_permission(as_root: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Root in a container without CAP_MKNOD."""
    executable(tmp_path / "gcc", "#!/bin/sh\nexit 0\n")
    executable(tmp_path / "ldconfig", "#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path))

    def refuse(path: str, mode: int = 0o600, device: int = 0) -> None:
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(os, "mknod", refuse)
    assert find_tools() == (
        "cannot make device nodes (Operation not permitted): run it as root on the machine itself, "
        "or in a container with CAP_MKNOD"
    )


def test_node_tools_raises_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "find_tools", lambda: "gcc not found: ...")
    node_tools.cache_clear()
    try:
        with pytest.raises(MissingTool, match=r"^gcc not found: \.\.\.$"):
            node_tools()
    finally:
        node_tools.cache_clear()


@pytest.mark.root
def test_demo_without_cdictk_dependencies_is_one_line() -> None:
    """`python3 -m tests.fakenode demo` with a Python that lacks click (Debian's, outside the venv)."""
    if isinstance(find_tools(), str):
        pytest.skip(f"the demo's earlier check fails here first: {find_tools()}")
    result = subprocess.run(
        [sys.executable, "-S", "-m", "tests.fakenode", "demo"],  # -S: no site-packages, so no click
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("fakenode: cdictk's dependencies (click, yaml, ")
    assert result.stderr.endswith("which installs them in a virtual environment\n")
    assert result.stderr.count("\n") == 1
