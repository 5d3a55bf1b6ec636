"""The other drivers' nodes: the gated modes' patterns and the IMEX channels, stat'ed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.node import othernodes
from cdictk.startpath.helpers.roots import Roots


def node(root: Path, path: str, major: int, minor: int) -> None:
    (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    os.mknod(root / path.lstrip("/"), stat.S_IFCHR | 0o666, os.makedev(major, minor))
    os.chmod(root / path.lstrip("/"), 0o666)  # mknod applies the umask


@pytest.mark.root
def test_gated_patterns_take_char_devices_only_each_once(tmp_path: Path) -> None:
    roots = Roots(str(tmp_path), str(tmp_path))
    node(tmp_path, "/dev/nvidia-nvswitchctl", 509, 255)
    for index in (10, 2):
        node(tmp_path, f"/dev/nvidia-nvswitch{index}", 509, index)
    (tmp_path / "dev/nvidia-nvswitch3").write_text("a file, not a node")
    found = othernodes.matching_nodes(roots, othernodes.GATED["nvswitch"])
    assert [(n.path, n.major, n.minor, n.mode) for n in found] == [
        ("/dev/nvidia-nvswitchctl", 509, 255, 0o666),
        ("/dev/nvidia-nvswitch2", 509, 2, 0o666),
        ("/dev/nvidia-nvswitch10", 509, 10, 0o666),
    ]
    assert othernodes.matching_nodes(roots, othernodes.GATED["mofed"]) == []
    assert othernodes.gated_pattern_text("mofed") == "/dev/infiniband/uverbs*, /dev/infiniband/rdma_cm"


@pytest.mark.root
def test_imex_channels_by_number(tmp_path: Path) -> None:
    roots = Roots(str(tmp_path), str(tmp_path))
    assert othernodes.imex_channels(roots) == {}
    for minor in (10, 0, 2):
        node(tmp_path, f"/dev/nvidia-caps-imex-channels/channel{minor}", 507, minor)
    node(tmp_path, "/dev/nvidia-caps-imex-channels/channel01", 507, 1)  # not the driver's name
    node(tmp_path, "/dev/nvidia-caps-imex-channels/channel2097152", 507, 3)  # past 20 bits
    channels = othernodes.imex_channels(roots)
    assert list(channels) == [0, 2, 10]
    assert channels[10].path == "/dev/nvidia-caps-imex-channels/channel10" and channels[10].minor == 10


def test_imex_channel_ids() -> None:
    assert othernodes.imex_channel_id("3") == 3
    assert othernodes.imex_channel_id("channel1048575") == 1048575
    for bad in ("channel1048576", "-1", "x", "channel", "\uff13", "99999999"):
        assert othernodes.imex_channel_id(bad) is None, bad
