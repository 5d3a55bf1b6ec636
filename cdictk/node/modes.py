"""The generate modes: each is a recipe, not a branch in the discovery code.

A recipe says how the GPU list is found, which discoverers (:mod:`cdictk.node.discoverers`) give the
spec's common edits, and which device kinds (:mod:`cdictk.nvcdi.devices`) give its devices. A new mode
is a member of :class:`Mode` and a row in :data:`MODES`; a new kind of file or node for the common
edits is a discoverer and its name in the recipes that want it.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class Mode(Enum):
    AUTO = "auto"  # NVML when it loads and answers, else procfs (with a warning)
    NVML = "nvml"  # NVML or fail
    PROCFS = "procfs"  # /proc/driver/nvidia/gpus only: full GPUs, no MIG
    MANAGEMENT = "management"  # every NVIDIA node in one device, no GPU list needed


class GpuSource(Enum):
    NVML_ELSE_PROCFS = "NVML, else procfs"
    NVML = "NVML"
    PROCFS = "procfs"
    NONE = "none"


# What a GPU container needs beside its devices: the driver's nodes, libraries and files.
DRIVER = ("control-nodes", "driver-libraries", "binaries", "firmware", "ipc", "configs", "xorg-modules")


class Recipe(NamedTuple):
    """A NamedTuple, not a dataclass: the command line builds --mode from this module on every start."""

    gpus: GpuSource  # how the GPU list is found
    common: tuple[str, ...]  # the discoverers of the common edits, by name
    devices: tuple[str, ...]  # the device kinds, by name
    # The spec's hook keeps NVML in the container from making device nodes; a management container is
    # there to manage them.
    mask_device_node_modification: bool = True


MODES: dict[Mode, Recipe] = {
    Mode.AUTO: Recipe(GpuSource.NVML_ELSE_PROCFS, DRIVER, ("gpus",)),
    Mode.NVML: Recipe(GpuSource.NVML, DRIVER, ("gpus",)),
    Mode.PROCFS: Recipe(GpuSource.PROCFS, DRIVER, ("gpus",)),
    Mode.MANAGEMENT: Recipe(GpuSource.NONE, DRIVER, ("all-nodes",), mask_device_node_modification=False),
}
