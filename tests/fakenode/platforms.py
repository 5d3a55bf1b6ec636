"""Fake nodes of the other generate modes: a WSL2 host, a Jetson Orin, an IMEX node, and nodes with
NVSwitch, GPUDirect Storage, InfiniBand (MOFED) and GDRCopy devices.

Like :mod:`tests.fakenode.node`, their device nodes are real character devices made with mknod and
their libraries real ELF shared objects (so building one needs root and gcc); the WSL2 store's
``libnvidia-ml.so.1`` is the fake NVML, so the driver version comes from NVML as on a real host,
reached as there through ``/usr/lib/wsl/lib``, which the node's ``ld.so.cache`` lists.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.fakenode.node import _mknod, _program, _stub, _symlink, _write
from tests.fakenode.nvml import FakeGpu, FakeNvmlConfig, build_fake_nvml
from tests.fakenode.tools import node_tools

WSL_VERSION = "581.42"  # what NVML in a Windows driver's store reports
WSL_STORE = "/usr/lib/wsl/drivers/nv_dispi.inf_amd64_5b3a1f0c9e7d2468"
WSL_OTHER_STORE = "/usr/lib/wsl/drivers/iigd_dch.inf_amd64_0c1d2e3f4a5b6c7d"  # Intel's: no libcuda
DXG = (10, 125)
# The store's files beside the ones every CUDA container needs: libraries, GPU code, Windows DLLs.
WSL_EXTRA = ("libnvwgf2umx.so", "libnvidia-encode.so.1", "nvdxgdmal64.dll", "nvptxJitCompiler64.dll")

JETSON_LIB = "/usr/lib/aarch64-linux-gnu/nvidia"
CSV_DIR = "/etc/nvidia-container-runtime/host-files-for-container.d"
NVHOST_MAJOR = 486
NVMAP = (10, 121)
JETSON_NODES = {
    "/dev/nvhost-ctrl-gpu": 1,
    "/dev/nvhost-gpu": 2,
    "/dev/nvhost-as-gpu": 3,
    "/dev/nvgpu/igpu0/ctrl": 4,
}
# (file, SONAME, links beside it as (link, target)): L4T 36's layout, a few libraries of it.
JETSON_LIBS = (
    (
        "libcuda.so.1.1",
        "libcuda.so.1",
        (("libcuda.so", "libcuda.so.1.1"), ("libcuda.so.1", "libcuda.so.1.1")),
    ),
    ("libnvrm_gpu.so", "libnvrm_gpu.so", ()),
    ("libnvrm_mem.so", "libnvrm_mem.so", ()),
    (
        "libnvidia-ptxjitcompiler.so.540.4.0",
        "libnvidia-ptxjitcompiler.so.1",
        (("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.540.4.0"),),
    ),
)
DEVICES_CSV = """\
# Jetson Orin device nodes
dev, /dev/nvmap
dev, /dev/nvhost-ctrl-gpu
dev, /dev/nvhost-gpu
dev, /dev/nvhost-as-gpu
dev, /dev/nvgpu/igpu0/*
dev, /dev/nvhost-nvdla*
"""
DRIVERS_CSV = f"""\
lib, {JETSON_LIB}/libcuda.so.1.1
sym, {JETSON_LIB}/libcuda.so
sym, {JETSON_LIB}/libcuda.so.1
lib, {JETSON_LIB}/libnvrm_gpu.so
lib, {JETSON_LIB}/libnvrm_mem.so
sym, {JETSON_LIB}/libnvidia-ptxjitcompiler.so.1

lib, /usr/lib/aarch64-linux-gnu/libv4l2.so.0.0.999999
"""
L4T_CSV = """\
dir, /usr/share/nvidia/nvpva
lib, /usr/lib/aarch64-linux-gnu/tegra-egl/libEGL_nvidia.so.0
"""

IMEX_MAJOR = 507
IMEX_CHANNELS = (0, 1, 7)
NVSWITCH_MAJOR = 509
GDS_MAJOR = 508
GDRDRV_MAJOR = 506
UVERBS_MAJOR = 231


@dataclass
class PlatformNode:
    """A node built by one of :data:`PLATFORMS`: its root, and the mode its spec is generated with."""

    root: str
    mode: str
    nodes: list[str] = field(default_factory=list)  # the device nodes its devices should hold
    files: list[str] = field(default_factory=list)  # the files its spec should mount (container paths)

    @property
    def proc(self) -> str:
        return os.path.join(self.root, "proc")

    @property
    def sys(self) -> str:
        return os.path.join(self.root, "sys")

    def cli_args(self) -> list[str]:
        return ["--driver-root", self.root, "--proc-root", self.proc, "--sys-root", self.sys]


def _procfs(node: PlatformNode, modules: str = "") -> None:
    _write(f"{node.proc}/devices", "Character devices:\n  1 mem\n 10 misc\n\nBlock devices:\n  8 sd\n")
    _write(f"{node.proc}/modules", modules + "ext4 1007616 1 - Live 0x0000000000000000\n")


def build_wsl(root: str, cache_dir: str) -> PlatformNode:
    """A WSL2 distribution with a GPU: /dev/dxg, libdxcore.so, NVIDIA's driver store beside Intel's,
    no /proc/driver/nvidia and no NVIDIA module. /usr/lib/wsl/lib holds libdxcore.so and
    libnvidia-ml.so.1 (Windows puts a copy there; here a link to the store's, so one config serves),
    and the ld.so.cache lists them, as WSL's ld.wsl.conf has it."""
    tools = node_tools()
    gcc = tools.gcc
    node = PlatformNode(root, "wsl", nodes=["/dev/dxg"])
    _mknod(root + "/dev/dxg", *DXG)
    _stub("libdxcore.so", root + "/usr/lib/wsl/lib/libdxcore.so", cache_dir, gcc)
    store = root + WSL_STORE
    for name, soname in (
        ("libcuda.so.1.1", "libcuda.so.1"),
        ("libcuda_loader.so", "libcuda_loader.so"),
        ("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.1"),
        ("libnvidia-ml_loader.so", "libnvidia-ml_loader.so"),
        ("libnvdxgdmal.so.1", "libnvdxgdmal.so.1"),
        ("libnvwgf2umx.so", "libnvwgf2umx.so"),
        ("libnvidia-encode.so.1", "libnvidia-encode.so.1"),
    ):
        _stub(soname, f"{store}/{name}", cache_dir, gcc)
    nvml = build_fake_nvml(store, WSL_VERSION, cache_dir=cache_dir)
    os.rename(nvml, f"{store}/libnvidia-ml.so.1")  # the store holds it under its SONAME
    _symlink(f"{WSL_STORE}/libnvidia-ml.so.1", root + "/usr/lib/wsl/lib/libnvidia-ml.so.1")
    _write(root + "/etc/ld.so.conf", "/usr/lib/wsl/lib\n")
    os.makedirs(root + "/var/cache/ldconfig", exist_ok=True)
    subprocess.run([tools.ldconfig, "-X", "-r", root], check=True)
    gpu = FakeGpu(0, 0, "GPU-6f1e2d3c-4b5a-4697-8877-665544332211", "00000000:01:00.0", "NVIDIA RTX A2000")
    FakeNvmlConfig(WSL_VERSION, 13000, [gpu], []).write(store)
    _write(f"{store}/nvcubins.bin", "cubins\n")
    for dll in ("nvdxgdmal64.dll", "nvptxJitCompiler64.dll"):
        _write(f"{store}/{dll}", "MZ\n")
    _write(f"{store}/nv_dispi.inf", "[Version]\n")  # the package's own files stay out
    _program(f"{store}/nvidia-smi", cache_dir, gcc)
    _write(root + WSL_OTHER_STORE + "/igdumdim64.dll", "MZ\n")
    _procfs(node)
    node.files = ["/usr/lib/wsl/lib/libdxcore.so"] + [
        f"{WSL_STORE}/{name}"
        for name in (
            "libcuda.so.1.1",
            "libcuda_loader.so",
            "libnvidia-ptxjitcompiler.so.1",
            "libnvidia-ml.so.1",
            "libnvidia-ml_loader.so",
            "libnvdxgdmal.so.1",
            "nvcubins.bin",
            "nvidia-smi",
            *WSL_EXTRA,
        )
    ]
    return node


def build_jetson(root: str, cache_dir: str) -> PlatformNode:
    """A Jetson Orin on L4T 36: /etc/nv_tegra_release, a tegra SoC, the nvhost and nvmap nodes, the
    CSV files and what they list (one dev glob, one library and the directory of another missing),
    an ld cache, and no NVML."""
    tools = node_tools()
    node = PlatformNode(root, "csv")
    _write(
        root + "/etc/nv_tegra_release",
        "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8\n",
    )
    _write(node.sys + "/devices/soc0/family", "Tegra\n")
    _mknod(root + "/dev/nvmap", *NVMAP)
    for path, minor in JETSON_NODES.items():
        _mknod(root + path, NVHOST_MAJOR, minor)
    node.nodes = ["/dev/nvmap", *JETSON_NODES]
    for file, soname, links in JETSON_LIBS:
        _stub(soname, f"{root}{JETSON_LIB}/{file}", cache_dir, tools.gcc)
        for link, target in links:
            _symlink(target, f"{root}{JETSON_LIB}/{link}")
    _write(root + "/usr/share/nvidia/nvpva/firmware.bin", "pva\n")
    _write(root + CSV_DIR + "/devices.csv", DEVICES_CSV)
    _write(root + CSV_DIR + "/drivers.csv", DRIVERS_CSV)
    _write(root + CSV_DIR + "/l4t.csv", L4T_CSV)
    _write(root + "/etc/ld.so.conf", JETSON_LIB + "\n")
    os.makedirs(root + "/var/cache/ldconfig", exist_ok=True)
    subprocess.run([tools.ldconfig, "-X", "-r", root], check=True)
    _procfs(node, "nvgpu 2768896 26 - Live 0x0000000000000000\n")
    node.files = [
        f"{JETSON_LIB}/libcuda.so.1.1",
        f"{JETSON_LIB}/libnvrm_gpu.so",
        f"{JETSON_LIB}/libnvrm_mem.so",
        f"{JETSON_LIB}/libnvidia-ptxjitcompiler.so.540.4.0",
        "/usr/share/nvidia/nvpva",
        "/etc/nv_tegra_release",
    ]
    return node


def build_imex(root: str, cache_dir: str) -> PlatformNode:
    """A node with IMEX channels 0, 1 and 7 (the driver makes channel nodes on demand) and no driver."""
    node = PlatformNode(root, "imex")
    for channel in IMEX_CHANNELS:
        path = f"/dev/nvidia-caps-imex-channels/channel{channel}"
        _mknod(root + path, IMEX_MAJOR, channel)
        node.nodes.append(path)
    _write(root + "/dev/nvidia-caps-imex-channels/README", "not a channel\n")
    _procfs(node)
    return node


def build_nvswitch(root: str, cache_dir: str) -> PlatformNode:
    node = PlatformNode(root, "nvswitch", nodes=["/dev/nvidia-nvswitchctl"])
    _mknod(root + "/dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 255)
    for index in range(4):
        _mknod(f"{root}/dev/nvidia-nvswitch{index}", NVSWITCH_MAJOR, index)
        node.nodes.append(f"/dev/nvidia-nvswitch{index}")
    _procfs(node)
    return node


def build_gds(root: str, cache_dir: str) -> PlatformNode:
    """nvidia-fs nodes, udev's database and /etc/cufile.json."""
    node = PlatformNode(root, "gds", files=["/etc/cufile.json", "/run/udev"])
    for index in range(2):
        _mknod(f"{root}/dev/nvidia-fs{index}", GDS_MAJOR, index)
        node.nodes.append(f"/dev/nvidia-fs{index}")
    _write(root + "/etc/cufile.json", '{"logging": {"level": "ERROR"}}\n')
    _write(root + "/run/udev/data/c508:0", "E:ID=nvidia-fs\n")
    _procfs(node)
    return node


def build_mofed(root: str, cache_dir: str) -> PlatformNode:
    """Two verbs nodes, the RDMA CM node, and a umad node the mode leaves alone."""
    node = PlatformNode(root, "mofed", nodes=["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"])
    for index in range(2):
        _mknod(f"{root}/dev/infiniband/uverbs{index}", UVERBS_MAJOR, 192 + index)
    _mknod(root + "/dev/infiniband/rdma_cm", 10, 58)
    _mknod(root + "/dev/infiniband/umad0", UVERBS_MAJOR, 0)
    node.nodes.append("/dev/infiniband/rdma_cm")
    _procfs(node)
    return node


def build_gdrcopy(root: str, cache_dir: str) -> PlatformNode:
    node = PlatformNode(root, "gdrcopy", nodes=["/dev/gdrdrv"])
    _mknod(root + "/dev/gdrdrv", GDRDRV_MAJOR, 0)
    _procfs(node)
    return node


PLATFORMS: dict[str, Callable[[str, str], PlatformNode]] = {
    "wsl": build_wsl,
    "jetson": build_jetson,
    "imex": build_imex,
    "nvswitch": build_nvswitch,
    "gds": build_gds,
    "mofed": build_mofed,
    "gdrcopy": build_gdrcopy,
}


def build_platform(root: str, name: str, cache_dir: str) -> PlatformNode:
    """Build the platform node ``name`` (a key of :data:`PLATFORMS`) under ``root``; needs root."""
    node_tools()  # MissingTool when the machine cannot build one
    os.makedirs(root, exist_ok=True)
    os.makedirs(cache_dir, exist_ok=True)
    return PLATFORMS[name](root, cache_dir)
