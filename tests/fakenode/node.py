"""A fake GPU node on disk: what cdictk's discovery reads on a real one, without a GPU.

- driver libraries are real ELF shared objects built by gcc, with real SONAMEs, versioned file names
  and the usual links, listed in a real ``ld.so.cache`` written by ``ldconfig -r``;
- ``libnvidia-ml.so.<version>`` is the fake NVML (``fake_nvml.c``), so pynvml runs for real;
- ``dev/`` holds real character devices made with mknod (195:N, the uvm and caps majors, DRM 226:N),
  which is why building a node needs root;
- ``proc/`` and ``sys/`` are plain trees with the files the NVIDIA modules would show.

The node's root stands for its ``/``; procfs is ``<root>/proc``, sysfs ``<root>/sys``, and the device nodes
are in ``<root>/dev``. Where the driver's files go is the preset's :class:`Layout`: Debian's multiarch
directories, RHEL's ``lib64`` (merged ``/usr``), a ``.run`` install, GKE's ``/usr/local/nvidia`` tree
with wrapper scripts on the host's PATH, or a driver container's root at ``/run/nvidia/driver``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.fakenode.nvml import FakeGpu, FakeMig, FakeNvmlConfig, append_event, build_fake_nvml
from tests.fakenode.tools import NodeTools, node_tools

LIB_DIR = "/usr/lib/x86_64-linux-gnu"
UVM_MAJOR = 238
CAPS_MAJOR = 241
DRM_MAJOR = 226
VIDEO_GID = 44
RENDER_GID = 105


@dataclass(frozen=True)
class Library:
    """A driver library: file name (``{v}`` is the driver version), SONAME, and links to make."""

    file: str
    soname: str
    links: tuple[tuple[str, str], ...] = ()  # (link name, target as written)


def _libs() -> tuple[Library, ...]:
    def versioned(stem: str, soname: str, *, dev_link: bool = False) -> Library:
        links = [] if soname == f"{stem}.{{v}}" else [(soname, f"{stem}.{{v}}")]
        if dev_link:
            links.append((stem.rsplit(".so", 1)[0] + ".so", soname))
        return Library(f"{stem}.{{v}}", soname, tuple(links))

    return (
        versioned("libcuda.so", "libcuda.so.1", dev_link=True),
        versioned("libcudadebugger.so", "libcudadebugger.so.1"),
        versioned("libnvidia-ptxjitcompiler.so", "libnvidia-ptxjitcompiler.so.1"),
        versioned("libnvidia-nvvm.so", "libnvidia-nvvm.so.4"),
        versioned("libnvidia-opencl.so", "libnvidia-opencl.so.1"),
        versioned("libnvidia-gpucomp.so", "libnvidia-gpucomp.so.{v}"),
        versioned("libnvidia-allocator.so", "libnvidia-allocator.so.1"),
        versioned("libnvidia-cfg.so", "libnvidia-cfg.so.1"),
        versioned("libnvidia-encode.so", "libnvidia-encode.so.1"),
        versioned("libnvcuvid.so", "libnvcuvid.so.1"),
        versioned("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1", dev_link=True),
        Library(
            "libGLX_nvidia.so.{v}",
            "libGLX_nvidia.so.0",
            (
                ("libGLX_nvidia.so.0", "libGLX_nvidia.so.{v}"),
                ("libGLX_indirect.so.0", "libGLX_nvidia.so.{v}"),
            ),
        ),
        versioned("libEGL_nvidia.so", "libEGL_nvidia.so.0"),
        versioned("libnvidia-glcore.so", "libnvidia-glcore.so.{v}"),
        versioned("libnvidia-eglcore.so", "libnvidia-eglcore.so.{v}"),
        versioned("libnvidia-tls.so", "libnvidia-tls.so.{v}"),
        versioned("libnvidia-glsi.so", "libnvidia-glsi.so.{v}"),
        Library(
            "vdpau/libvdpau_nvidia.so.{v}",
            "libvdpau_nvidia.so.1",
            (("vdpau/libvdpau_nvidia.so.1", "libvdpau_nvidia.so.{v}"),),
        ),
        # Driver libraries without the version suffix, which NVIDIA's generator misses.
        Library("libnvidia-api.so.1", "libnvidia-api.so.1"),
        Library(
            "libnvidia-egl-wayland.so.1.1.19",
            "libnvidia-egl-wayland.so.1",
            (("libnvidia-egl-wayland.so.1", "libnvidia-egl-wayland.so.1.1.19"),),
        ),
        Library(
            "libnvidia-egl-gbm.so.1.1.2",
            "libnvidia-egl-gbm.so.1",
            (("libnvidia-egl-gbm.so.1", "libnvidia-egl-gbm.so.1.1.2"),),
        ),
        # Not ours: another driver's leftover and an unrelated library in the same directory.
        Library("libnvidia-ml.so.550.54.15", "libnvidia-ml.so.1"),
        Library("libfoo.so.1.2.3", "libfoo.so.1", (("libfoo.so.1", "libfoo.so.1.2.3"),)),
    )


LIBRARIES = _libs()
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
CONFIGS = (
    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "/usr/share/vulkan/icd.d/nvidia_icd.json",
    "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    "/usr/share/nvidia/nvoptix.bin",
    "/etc/OpenCL/vendors/nvidia.icd",
)


@dataclass(frozen=True)
class Layout:
    """Where a driver install puts its files: paths inside ``tree``, the driver's own tree on the node
    (``/`` for a distribution's packages), which is what ``--driver-root`` names to point at it."""

    name: str
    lib_dir: str
    xorg_dirs: tuple[str, str] | None  # nvidia_drv.so's, libglxserver_nvidia's; None: no Xorg modules
    bin_dir: str = "/usr/bin"
    firmware_dir: str = "/lib/firmware"
    share_dir: str = "/usr/share"
    etc_dir: str | None = "/etc"  # OpenCL's vendor file; None: the install has none
    tree: str = "/"
    wrappers: bool = False  # the host's /usr/bin holds scripts that exec the tree's programs (GKE)
    cached: bool = True  # an ld.so.cache in the tree lists lib_dir
    merged_usr: bool = False  # /lib, /lib64, /bin and /sbin are links into /usr
    firmware_param: str = ""  # /sys/module/firmware_class/parameters/path
    dev_in_tree: bool = False  # the tree has the device nodes too (a driver container's /dev)
    dev_root: str | None = None  # --dev-root with --driver-root at the tree (None: the tree itself)


DEBIAN_XORG = (f"{LIB_DIR}/nvidia/xorg",) * 2
LIB64_XORG = ("/usr/lib64/xorg/modules/drivers", "/usr/lib64/xorg/modules/extensions")
LAYOUTS = {
    layout.name: layout
    for layout in (
        Layout("debian", LIB_DIR, DEBIAN_XORG),
        Layout("rhel", "/usr/lib64", LIB64_XORG, firmware_dir="/usr/lib/firmware", merged_usr=True),
        Layout("runfile", "/usr/lib64", LIB64_XORG),
        Layout(
            "gke",
            "/lib64",
            None,
            bin_dir="/bin",
            firmware_dir="/firmware",
            share_dir="/share",
            etc_dir=None,
            tree="/usr/local/nvidia",
            wrappers=True,
            cached=False,
            firmware_param="/usr/local/nvidia/firmware",
            dev_root="/",
        ),
        Layout("driver-container", LIB_DIR, DEBIAN_XORG, tree="/run/nvidia/driver", dev_in_tree=True),
    )
}


@dataclass(frozen=True)
class Preset:
    name: str
    driver_version: str
    gpus: tuple[FakeGpu, ...]
    migs: tuple[FakeMig, ...] = ()
    sockets: bool = False
    layout: Layout = LAYOUTS["debian"]
    nvlinks: tuple[tuple[int, int, int], ...] = ()  # (gpu, link, peer gpu), one entry per direction
    machine: str = "Standard PC (Q35 + ICH9, 2009)"  # DMI's product name (a QEMU VM's)


def nvlink_pairs(pairs: tuple[tuple[int, int], ...], links: int) -> tuple[tuple[int, int, int], ...]:
    """``links`` NVLinks between each pair, both directions, numbered from 0 on each GPU."""
    used: dict[int, int] = {}
    found = []
    for a, b in pairs:
        for _ in range(links):
            for gpu, peer in ((a, b), (b, a)):
                found.append((gpu, used.get(gpu, 0), peer))
                used[gpu] = used.get(gpu, 0) + 1
    return tuple(found)


def fake_gpu(
    index: int, bus: int, *, mig: str = "disabled", numa: int | None = None, pcisw: int | None = None
) -> FakeGpu:
    return FakeGpu(
        index=index,
        minor=index,
        uuid=f"GPU-4b1d0c2e-7a3f-4c55-9e21-0000000000{index:02d}",
        bus_id=f"00000000:{bus:02X}:00.0",
        name="NVIDIA H100 80GB HBM3",
        mig=mig,
        numa=numa,
        pcisw=pcisw,
    )


# An H100 80GB's GPU instance profiles: multiprocessors, then the shared copy engines, decoders,
# encoders, JPEG decoders and OFAs of each (nvidia-smi mig -lgip).
H100_MIG_PROFILES = {"1g.10gb": (16, (1, 1, 0, 1, 0)), "3g.40gb": (60, (3, 3, 0, 3, 0))}


def _mig(slot: int, gi: int, profile: str, gi_slices: int, memory_mb: int) -> FakeMig:
    sms, engines = H100_MIG_PROFILES[profile]
    return FakeMig(
        gpu=0,
        index=slot,
        gi=gi,
        ci=0,
        uuid=f"MIG-9f2e7d3c-1b4a-5e6f-8a9b-0000000000{slot:02d}",
        name=f"NVIDIA H100 80GB HBM3 MIG {profile}",
        gi_slices=gi_slices,
        ci_slices=gi_slices,
        memory_mb=memory_mb,
        sms=sms,
        engines=engines,
    )


BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
PRESETS = {
    "single": Preset("single", "580.95.05", (fake_gpu(0, BUSES[0]),)),
    "eight": Preset(
        "eight",
        "580.95.05",
        # Two NUMA nodes of four GPUs, two GPUs per PCIe switch, four NVLinks within the pairs 2-3,
        # 4-5 and 6-7 (GPU 0 is in MIG mode, GPU 1 has no NVLink): what the device plugin's
        # topology-aware allocation is tested on. Nothing else reads these.
        tuple(
            fake_gpu(i, bus, mig="enabled" if i == 0 else "disabled", numa=i // 4, pcisw=i // 2)
            for i, bus in enumerate(BUSES)
        ),
        (_mig(0, 2, "3g.40gb", 3, 40192), _mig(1, 7, "1g.10gb", 1, 9856), _mig(2, 8, "1g.10gb", 1, 9856)),
        sockets=True,
        nvlinks=nvlink_pairs(((2, 3), (4, 5), (6, 7)), 4),
        machine="DGX H100",
    ),
    **{
        name: Preset(name, "580.95.05", (fake_gpu(0, BUSES[0]),), layout=LAYOUTS[name])
        for name in ("rhel", "runfile", "gke", "driver-container")
    },
}


def mig_cap_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The kernel's numbering: 3 + 135 per GPU, 9 per GPU instance (its access, then 8 CIs)."""
    base = 3 + gpu_minor * 135 + gi * 9
    return base if ci is None else base + 1 + ci


def sysfs_bus(gpu: FakeGpu) -> str:
    domain, rest = gpu.bus_id.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


@dataclass
class FakeNode:
    root: str
    preset: Preset
    warnings: list[str] = field(default_factory=list)

    @property
    def proc(self) -> str:
        return os.path.join(self.root, "proc")

    @property
    def sys(self) -> str:
        return os.path.join(self.root, "sys")

    @property
    def tree(self) -> str:
        """The host path of the driver's own tree (the root itself for a distribution's packages)."""
        return self.root + self.preset.layout.tree.rstrip("/")

    @property
    def lib_dir(self) -> str:
        return self.tree + self.preset.layout.lib_dir

    @property
    def container_lib_dir(self) -> str:
        """The driver's library directory as a spec generated with :meth:`cli_args` names it."""
        layout = self.preset.layout
        return (
            layout.lib_dir
            if layout.tree == "/run/nvidia/driver"
            else layout.tree.rstrip("/") + layout.lib_dir
        )

    @property
    def version(self) -> str:
        return self.preset.driver_version

    def cli_args(self) -> list[str]:
        return ["--driver-root", self.root, "--proc-root", self.proc, "--sys-root", self.sys]

    def tree_cli_args(self) -> list[str]:
        """``--driver-root`` at the driver's own tree (``/usr/local/nvidia``), as an operator may give it."""
        dev = self.preset.layout.dev_root
        dev_args = ["--dev-root", self.root + dev.rstrip("/")] if dev is not None else []
        return ["--driver-root", self.tree, *dev_args, "--proc-root", self.proc, "--sys-root", self.sys]

    def nvml_config(self) -> FakeNvmlConfig:
        return FakeNvmlConfig(
            self.version,
            13000,
            list(self.preset.gpus),
            list(self.preset.migs),
            nvlinks=list(self.preset.nvlinks),
        )

    def write_nvml_config(self, config: FakeNvmlConfig) -> None:
        Path(self.lib_dir, "fake-nvml.conf").write_text(config.render())

    def nvml_event(self, line: str) -> None:
        """Tell the running fake NVML of an event: ``xid gpu=3 xid=79``, ``lost gpu=3``, ``recover gpu=3``."""
        append_event(self.lib_dir, line)

    def reconfigure_mig(self, migs: tuple[FakeMig, ...]) -> None:
        """What ``nvidia-smi mig -dci/-dgi/-cgi/-cci`` leaves behind: NVML's MIG devices, the driver's
        capability files under /proc/driver/nvidia/capabilities and the caps' device nodes."""
        self.preset = replace(self.preset, migs=migs)
        self.write_nvml_config(self.nvml_config())
        _mig_capabilities(self)
        _mig_cap_nodes(self)


def _write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_text(text)
    os.chmod(path, mode)


def _symlink(target: str, link: str) -> None:
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(target, link)


PROGRAM_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_program.c")


# What a library exports besides its marker function: CUDA's first two calls, so that a program that
# loads libcuda.so.1 and asks it for its devices (realnode/cuda_probe.c) passes on the fake node.
EXPORTS = {
    "libcuda.so.1": "int cuInit(unsigned int flags) { return 0; }\n"
    "int cuDeviceGetCount(int *count) { *count = 1; return 0; }\n",
}


def _stub(soname: str, out: str, cache_dir: str, gcc: str) -> None:
    """A real shared object with ``soname``, compiled once per source text into ``cache_dir``."""
    symbol = "".join(c if c.isalnum() else "_" for c in soname)
    text = f"int cdictk_fake_{symbol}(void) {{ return 0; }}\n" + EXPORTS.get(soname, "")
    key = hashlib.sha256(f"{soname}\0{text}".encode()).hexdigest()[:16]
    cached = os.path.join(cache_dir, f"stub-{key}.so")
    if not os.path.exists(cached):
        source = os.path.join(cache_dir, f"stub-{key}.c")
        Path(source).write_text(text)
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-O0", f"-Wl,-soname,{soname}", "-o", cached + ".tmp", source],
            check=True,
        )
        os.replace(cached + ".tmp", cached)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    shutil.copyfile(cached, out)
    os.chmod(out, 0o755)


def _mknod(path: str, major: int, minor: int, mode: int = 0o666, gid: int = 0) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)  # mknod applies the umask
    if gid:
        os.chown(path, 0, gid)


def build_node(root: str, preset: Preset | str, cache_dir: str) -> FakeNode:
    """Build the fake node ``preset`` under ``root`` (an empty or missing directory).

    Needs root, gcc, the C headers and ldconfig: ``MissingTool`` says which is missing.
    """
    tools = node_tools()
    preset = PRESETS[preset] if isinstance(preset, str) else preset
    os.makedirs(cache_dir, exist_ok=True)
    node = FakeNode(root, preset)
    if preset.layout.merged_usr:
        for name in ("lib", "lib64", "bin", "sbin"):
            os.makedirs(f"{root}/usr/{name}", exist_ok=True)
            os.symlink(f"usr/{name}", f"{root}/{name}")
    _libraries(node, cache_dir, tools)
    _driver_files(node, cache_dir, tools.gcc)
    _devices(node)
    _procfs(node)
    _sysfs(node)
    node.write_nvml_config(node.nvml_config())
    return node


def _libraries(node: FakeNode, cache_dir: str, tools: NodeTools) -> None:
    version, layout = node.version, node.preset.layout
    for library in LIBRARIES:
        _stub(
            library.soname.format(v=version),
            os.path.join(node.lib_dir, library.file.format(v=version)),
            cache_dir,
            tools.gcc,
        )
        for link, target in library.links:
            _symlink(target.format(v=version), os.path.join(node.lib_dir, link.format(v=version)))
    nvml = build_fake_nvml(node.lib_dir, version, cache_dir=cache_dir)
    _symlink(os.path.basename(nvml), os.path.join(node.lib_dir, "libnvidia-ml.so.1"))
    _symlink("libnvidia-ml.so.1", os.path.join(node.lib_dir, "libnvidia-ml.so"))
    _symlink("../libnvidia-allocator.so.1", os.path.join(node.lib_dir, "gbm/nvidia-drm_gbm.so"))
    if layout.xorg_dirs is not None:
        drivers, extensions = (node.tree + directory for directory in layout.xorg_dirs)
        _stub("nvidia_drv.so", os.path.join(drivers, "nvidia_drv.so"), cache_dir, tools.gcc)
        glx = f"libglxserver_nvidia.so.{version}"
        _stub(glx, os.path.join(extensions, glx), cache_dir, tools.gcc)
        _symlink(glx, os.path.join(extensions, "libglxserver_nvidia.so"))
    if layout.cached:
        _ld_cache(node.tree, layout.lib_dir, tools)
    if node.tree != node.root:  # the host's own cache, which lists no driver
        os.makedirs(node.root + LIB_DIR, exist_ok=True)
        _ld_cache(node.root, LIB_DIR, tools)


def _ld_cache(root: str, lib_dir: str, tools: NodeTools) -> None:
    _write(root + "/etc/ld.so.conf", f"{lib_dir}\n")
    os.makedirs(root + "/var/cache/ldconfig", exist_ok=True)
    # -X: the links above are the host's links as the driver installer left them; do not add others.
    subprocess.run([tools.ldconfig, "-X", "-r", root], check=True)


def _program(out: str, cache_dir: str, gcc: str) -> None:
    """A driver program's stand-in (fake_program.c): a static ELF that prints "fake", runnable in any
    rootfs (busybox's too), compiled once per source text into ``cache_dir``."""
    with open(PROGRAM_SOURCE, "rb") as source:
        key = hashlib.sha256(source.read()).hexdigest()[:16]
    cached = os.path.join(cache_dir, f"program-{key}")
    if not os.path.exists(cached):
        flags = [
            "-static",
            "-nostdlib",
            "-nostartfiles",
            "-O1",
            "-fno-stack-protector",
            "-fno-pie",
            "-no-pie",
        ]
        subprocess.run([gcc, *flags, "-o", cached + ".tmp", PROGRAM_SOURCE], check=True)
        os.replace(cached + ".tmp", cached)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    shutil.copyfile(cached, out)
    os.chmod(out, 0o755)


def _driver_files(node: FakeNode, cache_dir: str, gcc: str) -> None:
    layout = node.preset.layout
    for binary in BINARIES:  # the driver's programs are ELF: a wrapper script on a host is not one
        _program(f"{node.tree}{layout.bin_dir}/{binary}", cache_dir, gcc)
        if layout.wrappers:  # GKE's /usr/bin/nvidia-smi: `exec /usr/local/nvidia/bin/nvidia-smi "$@"`
            program = f"{layout.tree.rstrip('/')}{layout.bin_dir}/{binary}"
            _write(f"{node.root}/usr/bin/{binary}", f'#!/bin/sh\nexec {program} "$@"\n', 0o755)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        _write(f"{node.tree}{layout.firmware_dir}/nvidia/{node.version}/{name}", "firmware\n")
    for config in CONFIGS:
        if config.startswith("/usr/share/"):
            _write(node.tree + layout.share_dir + config.removeprefix("/usr/share"), "{}\n")
        elif layout.etc_dir is not None:
            _write(node.tree + layout.etc_dir + config.removeprefix("/etc"), "{}\n")
    if node.preset.sockets:
        path = node.root + "/run/nvidia-persistenced/socket"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(path)
        os.makedirs(node.root + "/tmp/nvidia-mps", exist_ok=True)


def _devices(node: FakeNode) -> None:
    _device_nodes(node, node.root + "/dev")
    if node.preset.layout.dev_in_tree:
        _device_nodes(node, node.tree + "/dev")


def _device_nodes(node: FakeNode, dev: str) -> None:
    _mknod(f"{dev}/nvidiactl", 195, 255)
    _mknod(f"{dev}/nvidia-modeset", 195, 254)
    _mknod(f"{dev}/nvidia-uvm", UVM_MAJOR, 0)
    _mknod(f"{dev}/nvidia-uvm-tools", UVM_MAJOR, 1)
    _mknod(f"{dev}/nvidia-caps/nvidia-cap1", CAPS_MAJOR, 1, 0o400)
    _mknod(f"{dev}/nvidia-caps/nvidia-cap2", CAPS_MAJOR, 2, 0o444)
    for gpu in node.preset.gpus:
        _mknod(f"{dev}/nvidia{gpu.minor}", 195, gpu.minor)
        card, render = f"card{gpu.index + 1}", f"renderD{128 + gpu.index}"
        _mknod(f"{dev}/dri/{card}", DRM_MAJOR, gpu.index + 1, 0o660, VIDEO_GID)
        _mknod(f"{dev}/dri/{render}", DRM_MAJOR, 128 + gpu.index, 0o660, RENDER_GID)
        _symlink(f"../{card}", f"{dev}/dri/by-path/pci-{sysfs_bus(gpu)}-card")
        _symlink(f"../{render}", f"{dev}/dri/by-path/pci-{sysfs_bus(gpu)}-render")
    if dev == node.root + "/dev":
        _mig_cap_nodes(node)
    if len(node.preset.gpus) > 1:
        _mknod(f"{dev}/nvidia-nvswitchctl", 234, 255)  # belongs to the NVSwitch driver: never in a spec


def _mig_cap_nodes(node: FakeNode) -> None:
    for mig in node.preset.migs:
        gpu = node.preset.gpus[mig.gpu]
        for minor in (mig_cap_minor(gpu.minor, mig.gi), mig_cap_minor(gpu.minor, mig.gi, mig.ci)):
            path = f"{node.root}/dev/nvidia-caps/nvidia-cap{minor}"
            if not os.path.lexists(path):
                _mknod(path, CAPS_MAJOR, minor, 0o444)


def _mig_capabilities(node: FakeNode) -> None:
    """/proc/driver/nvidia/capabilities as the driver shows it: a directory per existing GPU and
    compute instance, each with an ``access`` file naming its nvidia-caps minor."""
    top = f"{node.proc}/driver/nvidia/capabilities"
    shutil.rmtree(top, ignore_errors=True)
    for name, minor in (("config", 1), ("monitor", 2)):
        _write(f"{top}/mig/{name}", f"DeviceFileMinor: {minor}\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    for mig in node.preset.migs:
        gpu = node.preset.gpus[mig.gpu]
        gi_dir = f"{top}/gpu{gpu.minor}/mig/gi{mig.gi}"
        for path, minor in (
            (f"{gi_dir}/access", mig_cap_minor(gpu.minor, mig.gi)),
            (f"{gi_dir}/ci{mig.ci}/access", mig_cap_minor(gpu.minor, mig.gi, mig.ci)),
        ):
            _write(path, f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")


def _procfs(node: FakeNode) -> None:
    proc = node.proc
    _write(
        f"{proc}/devices",
        "Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia-frontend\n"
        f"{DRM_MAJOR} drm\n{UVM_MAJOR} nvidia-uvm\n{CAPS_MAJOR} nvidia-caps\n\nBlock devices:\n  8 sd\n",
    )
    _write(
        f"{proc}/modules",
        "nvidia_uvm 1531904 0 - Live 0x0000000000000000 (PO)\n"
        "nvidia_drm 81920 0 - Live 0x0000000000000000 (PO)\n"
        "nvidia_modeset 1638400 1 nvidia_drm, Live 0x0000000000000000 (PO)\n"
        "nvidia 104071168 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (PO)\n"
        "ext4 1007616 1 - Live 0x0000000000000000\n",
    )
    _write(
        f"{proc}/driver/nvidia/version",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {node.version}  Release Build  "
        "(dvs-builder@U22-I3-AE18-23-3)  Tue Sep 23 09:55:41 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)\n",
    )
    for gpu in node.preset.gpus:
        bus = sysfs_bus(gpu)
        _write(
            f"{proc}/driver/nvidia/gpus/{bus}/information",
            f"Model: \t\t {gpu.name}\nIRQ:   \t\t 0\nGPU UUID: \t {gpu.uuid}\nVideo BIOS: \t ??.??.??.??.??\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\n"
            f"Device Minor: \t {gpu.minor}\nGPU Excluded:\t No\n",
        )
    lines = ["config 1", "monitor 2"]
    for gpu in node.preset.gpus:
        for gi in range(15):
            lines.append(f"gpu{gpu.minor}/gi{gi}/access {mig_cap_minor(gpu.minor, gi)}")
            lines += [
                f"gpu{gpu.minor}/gi{gi}/ci{ci}/access {mig_cap_minor(gpu.minor, gi, ci)}" for ci in range(8)
            ]
    _write(f"{proc}/driver/nvidia-caps/mig-minors", "\n".join(lines) + "\n")
    _mig_capabilities(node)


def pcie_root(gpu: FakeGpu) -> str:
    """The root complex the fake node puts the GPU under: the bus below its own (``pci0000:17`` for
    ``0000:18:00.0``), through that bus's root port."""
    domain, bus = sysfs_bus(gpu).split(":")[:2]
    return f"pci{domain}:{int(bus, 16) - 1:02x}"


def _sysfs(node: FakeNode) -> None:
    for gpu in node.preset.gpus:
        # As the kernel has it: the function's directory under its root complex and root port in
        # devices/, and bus/pci/devices/<bus id> a relative link to it.
        root = pcie_root(gpu)
        port = f"{root.removeprefix('pci')}:00.0"
        device = f"{node.sys}/devices/{root}/{port}/{sysfs_bus(gpu)}"
        os.makedirs(device, exist_ok=True)
        os.makedirs(f"{node.sys}/bus/pci/devices", exist_ok=True)
        os.symlink(
            f"../../../devices/{root}/{port}/{sysfs_bus(gpu)}", f"{node.sys}/bus/pci/devices/{sysfs_bus(gpu)}"
        )
        os.makedirs(f"{device}/drm/card{gpu.index + 1}", exist_ok=True)
        os.makedirs(f"{device}/drm/renderD{128 + gpu.index}", exist_ok=True)
        _pci_device(device, gpu)
    _write(f"{node.sys}/module/firmware_class/parameters/path", node.preset.layout.firmware_param + "\n")
    _write(f"{node.sys}/class/dmi/id/product_name", node.preset.machine + "\n")


PCI_DEVICE_ID = 0x2330  # an H100 SXM5 80GB
PCI_SUBSYSTEM_ID = 0x16C1


def _pci_device(device: str, gpu: FakeGpu) -> None:
    """The attributes sysfs shows for the GPU's PCI function: what PCI tools (go-nvlib's nvpci, NFD's
    pci source, a node labeller) read, and its configuration space as root reads it (256 bytes)."""
    for name, value in (
        ("vendor", "0x10de"),
        ("device", f"0x{PCI_DEVICE_ID:04x}"),
        ("subsystem_vendor", "0x10de"),
        ("subsystem_device", f"0x{PCI_SUBSYSTEM_ID:04x}"),
        ("class", f"0x{gpu.pci_class:06x}"),
        ("numa_node", str(-1 if gpu.numa is None else gpu.numa)),
        # BAR0 (registers), BAR1 (the framebuffer window), BAR3; the unused ones as zeros.
        (
            "resource",
            "0x00000000fb000000 0x00000000fbffffff 0x0000000000040200\n"
            "0x0000220000000000 0x00002201ffffffff 0x000000000014220c\n"
            + "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
            + "0x0000223000000000 0x0000223001ffffff 0x000000000014220c\n"
            + "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 9,
        ),
    ):
        _write(f"{device}/{name}", value if value.endswith("\n") else value + "\n")
    Path(device, "config").write_bytes(pci_config(gpu.pci_class))


def pci_config(pci_class: int, capabilities: tuple[tuple[int, bytes], ...] = ()) -> bytes:
    """A GPU's PCI configuration space: its IDs, its class, and a capability list of power
    management, MSI and PCI Express, with ``capabilities`` (id, body after the id and next bytes)
    put first (a vendor-specific one, 0x09, is where a vGPU shows what its host runs)."""
    space = bytearray(256)
    space[0:4] = (0x10DE | PCI_DEVICE_ID << 16).to_bytes(4, "little")
    space[6] = 0x10  # status: a capability list
    space[9:12] = pci_class.to_bytes(3, "little")
    space[0x2C:0x30] = (0x10DE | PCI_SUBSYSTEM_ID << 16).to_bytes(4, "little")
    chain = [*capabilities, (0x01, b"\x03\x00"), (0x05, b"\x81\x00"), (0x10, b"\x02\x00")]
    at = 0x60
    space[0x34] = at
    for number, (cap, body) in enumerate(chain):
        following = at + 2 + len(body) + (-(2 + len(body)) % 8)
        space[at] = cap
        space[at + 1] = following if number + 1 < len(chain) else 0
        space[at + 2 : at + 2 + len(body)] = body
        at = following
    return bytes(space)
