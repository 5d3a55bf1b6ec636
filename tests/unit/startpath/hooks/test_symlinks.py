"""create-symlinks: TARGET::LINK parsing, atomic replacement, device links only for present devices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.symlinks import create_symlinks, parse_link


def test_parse_link() -> None:
    assert parse_link("libcuda.so.1::/usr/lib/libcuda.so") == ("libcuda.so.1", "/usr/lib/libcuda.so")
    assert parse_link("/abs/target::/x") == ("/abs/target", "/x")
    for bad in ("a", "a::", "::/b", "a::b::/c", "a::relative", "a::/", "a::/x/..", "a\t::/b"):
        with pytest.raises(HookError):
            parse_link(bad)


def test_links_are_made_once_and_replaced_atomically(tmp_path: Path) -> None:
    lib = tmp_path / "usr/lib"
    lib.mkdir(parents=True)
    (lib / "libcuda.so").write_text("the image's own stub")
    links = [("libcuda.so.1", "/usr/lib/libcuda.so"), ("libcuda.so.1", "/usr/lib/libcuda.so")]
    with Rootfs(str(tmp_path)) as rootfs:
        assert create_symlinks(rootfs, links) == ["/usr/lib/libcuda.so"]
        assert create_symlinks(rootfs, links) == []  # a second run changes nothing
    assert os.readlink(lib / "libcuda.so") == "libcuda.so.1"
    assert sorted(os.listdir(lib)) == ["libcuda.so"]


def test_a_directory_in_the_way_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "usr/lib/libcuda.so").mkdir(parents=True)
    (tmp_path / "usr/lib/libcuda.so/keep").write_text("")
    with (
        Rootfs(str(tmp_path)) as rootfs,
        pytest.raises(HookError, match=r"cannot create link /usr/lib/libcuda\.so"),
    ):
        create_symlinks(rootfs, [("libcuda.so.1", "/usr/lib/libcuda.so")])


def test_device_links_follow_the_devices_present(tmp_path: Path) -> None:
    dri = tmp_path / "dev/dri"
    dri.mkdir(parents=True)
    (dri / "renderD128").write_text("")
    (tmp_path / "dev/nvidia-caps").mkdir()
    links = [
        ("../card1", "/dev/dri/by-path/pci-0000:18:00.0-card"),
        ("../renderD128", "/dev/dri/by-path/pci-0000:18:00.0-render"),
        ("/dev/nvidia-caps", "/dev/caps-link"),
        ("../../../../etc/passwd", "/dev/dri/by-path/escape"),  # resolved inside: no /etc/passwd there
    ]
    with Rootfs(str(tmp_path)) as rootfs:
        made = create_symlinks(rootfs, links, devices_only=True)
    assert made == ["/dev/dri/by-path/pci-0000:18:00.0-render", "/dev/caps-link"]
    assert sorted(os.listdir(dri / "by-path")) == ["pci-0000:18:00.0-render"]
