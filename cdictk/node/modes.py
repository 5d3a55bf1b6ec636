"""The generate modes: each is a recipe, not a branch in the discovery code.

A recipe says how the GPU list is found, where the driver version comes from, which discoverers
(:mod:`cdictk.node.discoverers`) give the spec's common edits, which device kinds
(:mod:`cdictk.nvcdi.devices`) give its devices, and the defaults a mode's spec is written with. A new
mode is a member of :class:`Mode` and a row in :data:`MODES`; a new kind of file or node for the
common edits is a discoverer and its name in the recipes that want it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Mode(Enum):
    # WSL2 (libdxcore.so), else Jetson (Tegra without NVML), else NVML, else procfs (with a warning)
    AUTO = "auto"
    NVML = "nvml"  # NVML or fail
    PROCFS = "procfs"  # /proc/driver/nvidia/gpus only: full GPUs, no MIG
    MANAGEMENT = "management"  # every NVIDIA node in one device, no GPU list needed
    WSL = "wsl"  # WSL2: /dev/dxg and the Windows driver store
    CSV = "csv"  # Jetson (Tegra): the files and nodes the L4T CSV files list
    IMEX = "imex"  # a device per IMEX channel
    NVSWITCH = "nvswitch"  # NVSwitch nodes
    GDS = "gds"  # GPUDirect Storage (nvidia-fs) nodes
    MOFED = "mofed"  # InfiniBand verbs and RDMA CM nodes
    GDRCOPY = "gdrcopy"  # the gdrdrv node


class GpuSource(Enum):
    NVML_ELSE_PROCFS = "NVML, else procfs"
    NVML = "NVML"
    PROCFS = "procfs"
    NONE = "none"


# The sources that ask NVML.
NVML_SOURCES = frozenset({GpuSource.NVML_ELSE_PROCFS, GpuSource.NVML})


class DriverSource(Enum):
    """Where the driver version comes from."""

    HOST = "host"  # procfs, else NVML, else libcuda.so.<version>; required
    # procfs when it has one, else none (a Jetson: no /proc/driver/nvidia, and libcuda.so.1.1 carries
    # no driver version in its name)
    PROCFS_OPTIONAL = "procfs, optional"
    WSL_STORE = "WSL driver store"  # NVML in the store, else a versioned file there; none needed
    NONE = "none"  # not looked for: the mode's nodes belong to other drivers


# What a GPU container needs beside its devices: the driver's nodes, libraries and files.
DRIVER = ("control-nodes", "driver-libraries", "binaries", "firmware", "ipc", "configs", "xorg-modules")
GPU_SPEC = "/etc/cdi/nvidia.yaml"
# Hook steps by name (cdictk.startpath.hooks.steps names them; this module stays light to import).
CUDA_COMPAT = "enable-cuda-compat"
NODE_MODIFICATION = "disable-device-node-modification"
APP_PROFILE = "update-application-profile"  # NVIDIA writes it in the GPU modes alone


@dataclass(frozen=True, slots=True)
class Recipe:
    """How a mode finds its GPUs, common edits and devices, and its spec's defaults."""

    gpus: GpuSource  # how the GPU list is found
    common: tuple[str, ...]  # the discoverers of the common edits, by name
    devices: tuple[str, ...]  # the device kinds, by name
    driver: DriverSource = DriverSource.HOST
    # Hooks the mode never writes: a management container is there to make device nodes; WSL and
    # Jetson have no /proc/driver/nvidia/params to mask and no forward-compatible libcuda to pick; the
    # application profile is NVIDIA's for the GPU modes alone (its common-nvml discoverers).
    without_hooks: frozenset[str] = frozenset()
    # The CDI class and the output written when --class/--output are not given. The non-GPU modes get
    # their own: NVIDIA's CLI writes nvidia.com/gpu for them all, whose 'all' collides with the GPU spec's.
    cls: str = "gpu"
    output: str = GPU_SPEC
    device_ids: bool = False  # whether --device-id can pick among the mode's devices


def _other_driver(
    name: str, *, common: tuple[str, ...] = (), cls: str | None = None, devices: str | None = None
) -> Recipe:
    """A mode whose nodes belong to another driver: its devices alone, no GPU driver needed."""
    return Recipe(
        GpuSource.NONE,
        common,
        (devices or name,),
        DriverSource.NONE,
        without_hooks=frozenset({CUDA_COMPAT, NODE_MODIFICATION, APP_PROFILE}),  # no driver files, no GPU
        cls=cls or name,
        output=f"/etc/cdi/nvidia-{name}.yaml",
        device_ids=name == "imex",
    )


_NOT_ON_TEGRA_OR_WSL = frozenset({CUDA_COMPAT, NODE_MODIFICATION, APP_PROFILE})

MODES: dict[Mode, Recipe] = {
    Mode.AUTO: Recipe(GpuSource.NVML_ELSE_PROCFS, DRIVER, ("gpus",), device_ids=True),
    Mode.NVML: Recipe(GpuSource.NVML, DRIVER, ("gpus",), device_ids=True),
    Mode.PROCFS: Recipe(GpuSource.PROCFS, DRIVER, ("gpus",), device_ids=True),
    Mode.MANAGEMENT: Recipe(
        GpuSource.NONE, DRIVER, ("all-nodes",), without_hooks=frozenset({NODE_MODIFICATION, APP_PROFILE})
    ),
    Mode.WSL: Recipe(GpuSource.NONE, ("wsl-driver",), ("dxg",), DriverSource.WSL_STORE, _NOT_ON_TEGRA_OR_WSL),
    Mode.CSV: Recipe(
        GpuSource.NONE,
        ("csv-files",),
        ("csv-nodes",),
        DriverSource.PROCFS_OPTIONAL,
        _NOT_ON_TEGRA_OR_WSL,
        device_ids=True,
    ),
    Mode.IMEX: _other_driver("imex", cls="imex-channel", devices="imex-channels"),
    Mode.NVSWITCH: _other_driver("nvswitch"),
    Mode.GDS: _other_driver("gds", common=("gds-files",)),
    Mode.MOFED: _other_driver("mofed"),
    Mode.GDRCOPY: _other_driver("gdrcopy"),
}
