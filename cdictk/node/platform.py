"""Which platform a node is, for ``--mode auto`` and ``cdictk info``: WSL2, a Jetson, or a GPU host.

Decided in NVIDIA's order: ``libdxcore.so`` in the driver root's ``/usr/lib/wsl/lib`` is WSL2; else
``/etc/nv_tegra_release`` in the driver root, or a sysfs SoC family starting with "tegra", is a
Jetson (Tegra); anything else is a host with a discrete GPU. A Jetson without NVML, or whose NVML
reports its integrated GPU, is generated from its CSV files; one whose NVML reports discrete GPUs
only the way a GPU host is, with a warning, since that is a guess.
"""

from __future__ import annotations

import os
import stat
from enum import Enum

from cdictk.node import wsl
from cdictk.node.csvfiles import TEGRA_RELEASE
from cdictk.startpath.helpers.roots import Roots, read_text

SOC_FAMILY = "devices/soc0/family"


class Platform(Enum):
    WSL = "WSL2"
    TEGRA = "Jetson (Tegra)"
    GPU_HOST = "GPU host"


def is_tegra(roots: Roots) -> bool:
    try:
        if stat.S_ISREG(os.stat(roots.in_driver(TEGRA_RELEASE)).st_mode):
            return True
    except OSError:
        pass
    family = read_text(roots.in_sys(SOC_FAMILY)) or ""
    return family.strip().lower().startswith("tegra")


def is_integrated_gpu(name: str) -> bool:
    """A Jetson's own GPU by the name NVML gives it: an Orin's "Orin (nvgpu)", a Thor's "NVIDIA Thor"."""
    return "(nvgpu)" in name or name.startswith("NVIDIA Thor")


def detect(roots: Roots) -> Platform:
    if wsl.has_dxcore(roots):
        return Platform.WSL
    if is_tegra(roots):
        return Platform.TEGRA
    return Platform.GPU_HOST
