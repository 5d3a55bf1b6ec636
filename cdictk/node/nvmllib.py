"""Which NVML library cdictk loads, its error, and the names NVML gives GPU brands.

NVML itself is asked in the one NVML runner's child (:mod:`cdictk.node.nvmlchild`), through pynvml.
"""

from __future__ import annotations

from cdictk.node.libchoice import judge_opened, library_path, loadable
from cdictk.startpath.helpers.errors import CdictkError


class NvmlError(CdictkError):
    """NVML could not be loaded or answered with an error. ``library`` names it in the message;
    ``absent``: there is no usable library at all (as opposed to one that answered badly or not)."""

    def __init__(self, reason: str, *, library: str = "", absent: bool = False) -> None:
        super().__init__(library, "NVML" if library else "", reason)
        self.absent = absent


NVML = "libnvidia-ml.so.1"
# What NVML opens by name, through the loader, where a node has it: the Windows driver's NVML on WSL2
# reaches the GPU through libdxcore.so.
NVML_OPENS = ("libdxcore.so",)


def nvml_library(driver_root: str, mounted: str | None = None) -> str:
    """The host path of the NVML to load: ``mounted`` (the one a spec mounts), else the one the driver
    root's loader would take (:func:`cdictk.node.libchoice.library_path`); either way root's alone, with
    what it opens judged in the driver root. LibraryError says why there is none."""
    if mounted is None:
        return library_path(driver_root, NVML, opens=NVML_OPENS)
    path = loadable(mounted)
    judge_opened(driver_root, NVML, NVML_OPENS)
    return path


# nvmlBrandType_t (nvml.h) -> libnvidia-container's name (src/driver.c), lower-cased as requirements compare
# it without regard to case. Brands it does not name (NVML_BRAND_UNKNOWN, newer ones) are "unknown".
BRANDS = {
    1: "quadro",  # NVML_BRAND_QUADRO
    2: "tesla",  # NVML_BRAND_TESLA
    3: "nvs",  # NVML_BRAND_NVS
    4: "grid",  # NVML_BRAND_GRID
    5: "geforce",  # NVML_BRAND_GEFORCE
    6: "titan",  # NVML_BRAND_TITAN
    7: "vapps",  # NVML_BRAND_NVIDIA_VAPPS
    8: "vpc",  # NVML_BRAND_NVIDIA_VPC
    9: "vcs",  # NVML_BRAND_NVIDIA_VCS
    10: "vws",  # NVML_BRAND_NVIDIA_VWS
    11: "cloudgaming",  # NVML_BRAND_NVIDIA_CLOUD_GAMING (was NVML_BRAND_NVIDIA_VGAMING)
    12: "quadrortx",  # NVML_BRAND_QUADRO_RTX
    13: "nvidiartx",  # NVML_BRAND_NVIDIA_RTX
    14: "nvidia",  # NVML_BRAND_NVIDIA
    15: "geforcertx",  # NVML_BRAND_GEFORCE_RTX
    16: "titanrtx",  # NVML_BRAND_TITAN_RTX
}
UNKNOWN_BRAND = "unknown"
