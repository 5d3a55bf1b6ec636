"""update-application-profile: the EGLVisibleDGPUDevices mask of the container's GPU nodes, written as
nvidia-cdi-hook (toolkit 1.20) writes it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.appprofile import PROFILE, profile, update_application_profile

pytestmark = pytest.mark.root


def _node(dev: Path, name: str, minor: int) -> None:
    os.mknod(dev / name, stat.S_IFCHR | 0o666, os.makedev(195, minor))


def test_the_profile_names_the_gpus_whose_nodes_the_container_has(root_dir: Path) -> None:
    dev = root_dir / "dev"
    dev.mkdir()
    _node(dev, "nvidia0", 0)
    _node(dev, "nvidia3", 3)
    _node(dev, "nvidia70", 70)  # beyond the mask: left out
    _node(dev, "nvidiactl", 255)
    (dev / "nvidia5").symlink_to("nvidia0")  # not a device node
    (dev / "nvidia6").write_text("")
    with Rootfs(str(root_dir)) as rootfs:
        assert update_application_profile(rootfs)
    written = root_dir / PROFILE.lstrip("/")
    assert written.read_bytes() == (
        b'{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x9]}],'
        b'"rules":[{"pattern":[],"profile":"_container_"}]}'
    )
    assert stat.S_IMODE(written.stat().st_mode) == 0o444
    assert stat.S_IMODE(written.parent.stat().st_mode) == 0o555


def test_no_gpu_node_no_profile(root_dir: Path) -> None:
    (root_dir / "dev").mkdir()
    _node(root_dir / "dev", "nvidiactl", 255)
    with Rootfs(str(root_dir)) as rootfs:
        assert not update_application_profile(rootfs)
    assert not (root_dir / "etc").exists()
    assert profile([64, -1]) is None


def test_a_planted_link_at_the_profile_is_replaced_not_followed(root_dir: Path, tmp_path: Path) -> None:
    (root_dir / "dev").mkdir()
    _node(root_dir / "dev", "nvidia1", 1)
    outside = tmp_path / "outside"
    outside.write_text("host file\n")
    folder = root_dir / PROFILE.lstrip("/")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(outside)
    with Rootfs(str(root_dir)) as rootfs:
        assert update_application_profile(rootfs)
    assert outside.read_text() == "host file\n"
    assert not folder.is_symlink() and b"0x2]" in folder.read_bytes()
