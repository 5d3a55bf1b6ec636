"""The other modes' fake nodes: real character devices and ELF stubs where their drivers put them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO
from tests.conftest import PlatformFactory, require_node_tools
from tests.fakenode.platforms import PLATFORMS

pytestmark = pytest.mark.root


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_each_platform_has_its_nodes_and_files(make_platform: PlatformFactory, name: str) -> None:
    node = make_platform(name)
    assert node.nodes
    for path in node.nodes:
        assert stat.S_ISCHR(os.lstat(node.root + path).st_mode), path
    for path in node.files:
        assert os.path.exists(node.root + path), path
    assert os.path.isfile(os.path.join(node.proc, "modules"))


def test_the_libraries_are_elf(make_platform: PlatformFactory) -> None:
    for name in ("wsl", "jetson"):
        node = make_platform(name)
        libraries = [path for path in node.files if ".so" in path]
        assert libraries
        for path in libraries:
            with open(node.root + path, "rb") as file:
                assert file.read(4) == b"\x7fELF", path


def test_the_build_command_builds_a_platform_and_prints_its_flags(tmp_path: Path) -> None:
    require_node_tools()
    root = tmp_path / "node"
    result = subprocess.run(
        [sys.executable, "-m", "tests.fakenode", "build", str(root), "--platform", "gdrcopy"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "--driver-root",
        str(root),
        "--proc-root",
        f"{root}/proc",
        "--sys-root",
        f"{root}/sys",
        "--mode",
        "gdrcopy",
    ]
    assert stat.S_ISCHR(os.lstat(root / "dev/gdrdrv").st_mode)
