"""A spec generated in each mode beside the GPU host's, on its fake node, injected into a runc or crun
bundle with ``cdictk cdi inject``: in the container the mode's nodes are there with their numbers,
its files are mounted read-only, and the hook's links work (WSL's nvidia-smi on PATH runs; a Jetson's
libcuda.so names its library).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import PlatformFactory
from tests.e2e.conftest import Runtime
from tests.e2e.test_runtimes import cdictk, make_bundle
from tests.fakenode.platforms import JETSON_LIB, WSL_STORE, PlatformNode

pytestmark = pytest.mark.root

# mode -> (the device to inject, what the container runs)
INSIDE = {
    "wsl": (
        "all",
        "ls -l /dev/dxg; ls /usr/lib/wsl/lib/libdxcore.so; "
        f"grep ' {WSL_STORE}/libcuda.so.1.1 ' /proc/self/mountinfo; /usr/bin/nvidia-smi; readlink /usr/bin/nvidia-smi",
    ),
    "jetson": (
        "0",
        "ls -l /dev/nvmap /dev/nvhost-gpu /dev/nvgpu/igpu0/ctrl; "
        f"grep ' {JETSON_LIB}/libcuda.so.1.1 ' /proc/self/mountinfo; readlink {JETSON_LIB}/libcuda.so; "
        "cat /etc/nv_tegra_release; ls /usr/share/nvidia/nvpva",
    ),
    "imex": ("1", "ls -l /dev/nvidia-caps-imex-channels/"),
    "nvswitch": ("all", "ls -l /dev/nvidia-nvswitchctl /dev/nvidia-nvswitch0 /dev/nvidia-nvswitch3"),
    "gds": ("all", "ls -l /dev/nvidia-fs0 /dev/nvidia-fs1; cat /etc/cufile.json; ls /run/udev/data"),
    "mofed": ("all", "ls -l /dev/infiniband/"),
    "gdrcopy": ("all", "ls -l /dev/gdrdrv"),
}
KIND = {"wsl": "gpu", "jetson": "gpu", "imex": "imex-channel"}


def run_mode(node: PlatformNode, name: str, runtime: Runtime, rootfs: Path, tmp_path: Path) -> list[str]:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    made = cdictk("cdi", "generate", *node.cli_args(), "--mode", node.mode, "-o", str(spec_dir / "spec.yaml"))
    assert made.returncode == 0, made.stderr
    own_rootfs = tmp_path / "rootfs"  # the runtime makes mount points, the hook links, in it
    shutil.copytree(rootfs, own_rootfs, symlinks=True)
    device, script = INSIDE[name]
    bundle = make_bundle(tmp_path / "bundle", own_rootfs, script)
    config = json.loads((bundle / "config.json").read_text())
    config["root"]["readonly"] = False  # crun makes the rootfs read-only before createContainer hooks
    (bundle / "config.json").write_text(json.dumps(config))
    qualified = f"nvidia.com/{KIND.get(name, name)}={device}"
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(spec_dir), "-d", qualified, str(bundle / "config.json")
    )
    assert injected.returncode == 0, injected.stderr
    _, result = runtime.run(bundle)
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{result.stdout}"
    return result.stdout.splitlines()


def line_of(lines: list[str], end: str) -> str:
    return next(line for line in lines if line.endswith(end))


def read_only(lines: list[str], path: str) -> bool:
    mountinfo = next(line for line in lines if f" {path} " in line)
    return " ro," in mountinfo or " ro " in mountinfo


def test_wsl(runtime: Runtime, rootfs: Path, make_platform: PlatformFactory, tmp_path: Path) -> None:
    lines = run_mode(make_platform("wsl"), "wsl", runtime, rootfs, tmp_path)
    assert line_of(lines, "/dev/dxg").startswith("crw-rw-rw-") and "10, 125" in line_of(lines, "/dev/dxg")
    assert "/usr/lib/wsl/lib/libdxcore.so" in lines
    assert read_only(lines, f"{WSL_STORE}/libcuda.so.1.1")
    assert "fake" in lines  # the store's nvidia-smi, through the link the hook made on PATH
    assert f"{WSL_STORE}/nvidia-smi" in lines


def test_jetson(runtime: Runtime, rootfs: Path, make_platform: PlatformFactory, tmp_path: Path) -> None:
    lines = run_mode(make_platform("jetson"), "jetson", runtime, rootfs, tmp_path)
    assert "10, 121" in line_of(lines, "/dev/nvmap")
    assert "486,   2" in line_of(lines, "/dev/nvhost-gpu")
    assert "486,   4" in line_of(lines, "/dev/nvgpu/igpu0/ctrl")
    assert read_only(lines, f"{JETSON_LIB}/libcuda.so.1.1")
    assert "libcuda.so.1.1" in lines  # the link a sym entry named, made by the hook
    assert any(line.startswith("# R36 (release)") for line in lines)
    assert "firmware.bin" in lines


def test_imex_one_channel(
    runtime: Runtime, rootfs: Path, make_platform: PlatformFactory, tmp_path: Path
) -> None:
    lines = run_mode(make_platform("imex"), "imex", runtime, rootfs, tmp_path)
    channels = [line for line in lines if "channel" in line]
    assert len(channels) == 1 and channels[0].endswith(" channel1") and "507,   1" in channels[0]


GATED_NODES = {
    "nvswitch": {"/dev/nvidia-nvswitchctl": "509, 255", "/dev/nvidia-nvswitch3": "509,   3"},
    "gds": {"/dev/nvidia-fs0": "508,   0", "/dev/nvidia-fs1": "508,   1"},
    "mofed": {" uverbs0": "231, 192", " uverbs1": "231, 193", " rdma_cm": " 10,  58"},
    "gdrcopy": {"/dev/gdrdrv": "506,   0"},
}


@pytest.mark.parametrize("name", sorted(GATED_NODES))
def test_gated_modes(
    runtime: Runtime, rootfs: Path, make_platform: PlatformFactory, tmp_path: Path, name: str
) -> None:
    lines = run_mode(make_platform(name), name, runtime, rootfs, tmp_path)
    for path, numbers in GATED_NODES[name].items():
        assert numbers in line_of(lines, path), lines
    if name == "mofed":
        assert not any(line.endswith(" umad0") for line in lines)  # not the mode's node
    if name == "gds":
        assert '{"logging": {"level": "ERROR"}}' in lines and "c508:0" in lines
