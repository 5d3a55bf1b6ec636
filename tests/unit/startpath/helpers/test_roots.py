from __future__ import annotations

import os
from pathlib import Path

from cdictk.startpath.helpers.roots import Roots, join, resolve


def test_join_and_roots() -> None:
    assert join("/", "/dev/nvidia0") == "/dev/nvidia0"
    assert join("/run/nvidia/driver/", "/usr/lib") == "/run/nvidia/driver/usr/lib"
    roots = Roots(driver="/d", dev="/v", proc="/p", sys="/s")
    assert roots.in_driver("/etc/ld.so.cache") == "/d/etc/ld.so.cache"
    assert roots.in_dev("/dev/nvidiactl") == "/v/dev/nvidiactl"
    assert roots.in_proc("driver/nvidia/version") == "/p/driver/nvidia/version"
    assert roots.in_sys("bus/pci/devices") == "/s/bus/pci/devices"


def test_resolve_stays_in_the_root(tmp_path: Path) -> None:
    lib = tmp_path / "usr/lib"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.580.1").write_text("x")
    os.symlink("libcuda.so.580.1", lib / "libcuda.so.1")
    os.symlink("/usr/lib/libcuda.so.1", lib / "absolute")  # absolute: means inside the root
    os.symlink("../../../../../../usr/lib/libcuda.so.1", lib / "climbing")  # .. stops at the root
    os.symlink("/lib", tmp_path / "lib-link")
    os.symlink("usr/lib", tmp_path / "lib")
    os.symlink("loop", lib / "loop")
    os.symlink("missing", lib / "dangling")
    root = str(tmp_path)
    assert resolve(root, "/usr/lib/libcuda.so.1") == "/usr/lib/libcuda.so.580.1"
    assert resolve(root, "/usr/lib/absolute") == "/usr/lib/libcuda.so.580.1"
    assert resolve(root, "/usr/lib/climbing") == "/usr/lib/libcuda.so.580.1"
    assert resolve(root, "/lib-link/libcuda.so.1") == "/usr/lib/libcuda.so.580.1"
    assert resolve(root, "/usr/lib/loop") is None
    assert resolve(root, "/usr/lib/dangling") is None
    assert resolve(root, "/nowhere") is None
    assert resolve(root, "/") == "/"
