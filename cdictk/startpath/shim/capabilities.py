"""Which driver files a container gets for its ``NVIDIA_DRIVER_CAPABILITIES``.

A generated spec mounts every driver file the node has (libraries, binaries, config files, firmware,
IPC sockets). NVIDIA's runtime ignores ``NVIDIA_DRIVER_CAPABILITIES`` in CDI mode and mounts them all;
``cdictk-runtime`` keeps only the mounts the container asked for. This module sorts a mount into a
capability from its container path (mostly the file name) and filters a list of mounts.

How a path is read:

- the file name's *stem* is what comes before the first ``.so`` that ends the name or is followed by a
  dot (``libcuda.so.580.95.05`` -> ``libcuda``, ``libnvidia-egl-wayland.so.1.1.19`` ->
  ``libnvidia-egl-wayland``); a name without ``.so`` is its own stem (``nvidia-smi``, ``nvidia.icd``);
- the stem is looked up exactly, then against a few family prefixes (``libnvidia-nvvm`` covers
  ``libnvidia-nvvm70``, ``libnvidia-egl-`` the EGL platform libraries), then by suffix (``.icd``), then
  by the name of the directory holding it (``egl_vendor.d``, ``icd.d``, ``xorg.conf.d``, the
  ``nvidia-persistenced`` socket directory). Lookups are exact on purpose: a file this module does not
  know is *kept* whatever was asked for, so a new driver file is never dropped by a prefix that happened
  to match it.

Decisions (libnvidia-container's lists are the starting point, ``nvc_info.c``):

- A file may belong to several capabilities and is kept when any of them is asked for.
  ``libnvidia-gpucomp`` is compute in libnvidia-container but it is also the shader compiler behind the
  GL and Vulkan driver, so it is compute *and* graphics. ``libnvidia-allocator`` is the GBM backend
  (graphics) and is compute in libnvidia-container, which we keep so compute containers lose nothing.
- ``display`` implies ``graphics`` (NVIDIA's runtime applies the graphics mounts for either): an X
  server in the container needs the GL stack too. The X server modules (``nvidia_drv.so``,
  ``libglxserver_nvidia.so``), ``xorg.conf.d`` snippets, ``nvidia-xconfig``, ``nvidia-settings`` and its
  GTK/Wayland helper libraries are ``display`` only: nothing but an X server or its settings tool loads
  them, though NVIDIA's runtime hands the modules to every ``graphics`` container.
- ``libnvidia-api`` (NVAPI, used by DXVK-NVAPI under Wine/Proton) is graphics; the Vulkan, EGL and GLVND
  JSON files, ``nvoptix.bin`` and the application profiles go with the graphics libraries.
- The persistenced and fabric manager sockets, ``nvidia-imex``/``nvidia-imex-ctl``, ``libnvidia-cfg``,
  ``libnvidia-nscq`` and ``libnvidia-sandboxutils`` are utility; the MPS pipe directory and the MPS
  binaries are compute.
- Firmware (any path with a ``firmware`` directory) is always kept: it belongs to the driver as a
  whole rather than to one capability, and libnvidia-container mounts it whatever is asked for.
- 32-bit copies (a ``lib32``, ``i386-linux-gnu``, ``i686-linux-gnu`` or ``arm-linux-gnueabihf``
  directory) need ``compat32`` *in addition to* their own capability: the 32-bit ``libcuda`` is kept
  only for ``compute,compat32``. A 32-bit file of unknown kind needs ``compat32`` alone. A plain
  ``/usr/lib`` is not taken as 32-bit, since it holds 64-bit libraries on many distributions.

Runs on every container start: standard library only, and not even :mod:`typing`, :mod:`re` or
:mod:`os` at import (paths are split with ``str`` methods).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

COMPUTE = "compute"
UTILITY = "utility"
GRAPHICS = "graphics"
VIDEO = "video"
DISPLAY = "display"
COMPAT32 = "compat32"
NGX = "ngx"

_EVERY = frozenset({COMPUTE, UTILITY, GRAPHICS, VIDEO, DISPLAY, COMPAT32, NGX})

_C = (COMPUTE,)
_U = (UTILITY,)
_G = (GRAPHICS,)
_V = (VIDEO,)
_D = (DISPLAY,)
_N = (NGX,)
_SHADER_COMPILER = (COMPUTE, GRAPHICS)  # OpenCL and the GL/Vulkan driver both load it
_GBM_ALLOCATOR = (GRAPHICS, COMPUTE)  # the GBM backend; compute in libnvidia-container
_ALWAYS: tuple[str, ...] = ()

# Exact stems (file names without ``.so`` and what follows it).
_BY_STEM: dict[str, tuple[str, ...]] = {
    # compute
    "libcuda": _C,
    "libcuda_loader": _C,  # WSL
    "libcudadebugger": _C,
    "libnvidia-ptxjitcompiler": _C,
    "libnvidia-opencl": _C,
    "libOpenCL": _C,
    "libnvidia-fatbinaryloader": _C,
    "libnvidia-compiler": _C,
    "libnvidia-tileiras": _C,
    "libnvidia-gpucomp": _SHADER_COMPILER,
    "libnvidia-allocator": _GBM_ALLOCATOR,
    "nvcubins.bin": _C,  # WSL: the kernels libcuda loads
    "nvidia-cuda-mps-control": _C,
    "nvidia-cuda-mps-server": _C,
    "nvidia-mps": _C,  # the MPS pipe directory
    # utility
    "libnvidia-ml": _U,
    "libnvidia-ml_loader": _U,  # WSL
    "libnvidia-cfg": _U,
    "libnvidia-sandboxutils": _U,
    "nvidia-smi": _U,
    "nvidia-debugdump": _U,
    "nvidia-persistenced": _U,
    "nv-fabricmanager": _U,
    "nvidia-imex": _U,
    "nvidia-imex-ctl": _U,
    "nvidia-powerd": _U,
    "nvidia-bug-report.sh": _U,
    # graphics: the GLVND vendor libraries, the GL/EGL/Vulkan core, GLVND's dispatch libraries
    "libGLX_nvidia": _G,
    "libEGL_nvidia": _G,
    "libGLESv2_nvidia": _G,
    "libGLESv1_CM_nvidia": _G,
    "libnvidia-glcore": _G,
    "libnvidia-eglcore": _G,
    "libnvidia-glsi": _G,
    "libnvidia-tls": _G,
    "libnvidia-glvkspirv": _G,
    "libnvidia-cbl": _G,
    "libnvidia-rtcore": _G,
    "libnvoptix": _G,
    "libnvidia-fbc": _G,
    "libnvidia-ifr": _G,
    "libnvidia-vulkan-producer": _G,
    "libnvidia-vksc-core": _G,
    "libnvidia-api": _G,
    "nvidia-drm_gbm": _G,
    "nvoptix.bin": _G,
    "libGL": _G,
    "libGLX": _G,
    "libGLdispatch": _G,
    "libOpenGL": _G,
    "libEGL": _G,
    "libGLESv1_CM": _G,
    "libGLESv2": _G,
    # video
    "libnvcuvid": _V,
    "libnvidia-encode": _V,
    "libvdpau_nvidia": _V,
    "libnvidia-opticalflow": _V,
    # display: an X server in the container and nvidia-settings
    "nvidia_drv": _D,
    "libglxserver_nvidia": _D,
    "libnvidia-wfb": _D,
    "libnvidia-wayland-client": _D,
    "nvidia-xconfig": _D,
    "nvidia-settings": _D,
    # ngx
    "libnvidia-ngx": _N,
    "nvidia-ngx-updater": _N,
}

# Families whose members carry a version or variant in the stem.
_BY_PREFIX: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("libnvidia-nvvm", _C),  # libnvidia-nvvm, libnvidia-nvvm70
    ("libnvidia-pkcs11", _C),  # libnvidia-pkcs11, libnvidia-pkcs11-openssl3
    ("libnvidia-nscq", _U),
    ("libnvidia-egl-", _G),  # egl-wayland, egl-wayland2, egl-gbm, egl-xcb, egl-xlib
    ("nvidia-application-profiles", _G),
    ("libnvidia-gtk", _D),  # libnvidia-gtk2, libnvidia-gtk3: nvidia-settings
    ("nvngx", _N),  # the DLSS DLLs shipped for Wine/Proton
    ("_nvngx", _N),
)

_BY_SUFFIX: tuple[tuple[str, tuple[str, ...]], ...] = ((".icd", _C),)  # OpenCL vendor files

# The directory that holds the file, for files whose own name says little.
_BY_DIR: dict[str, tuple[str, ...]] = {
    "nvidia-persistenced": _U,  # .../nvidia-persistenced/socket
    "nvidia-fabricmanager": _U,
    "egl_vendor.d": _G,
    "egl_external_platform.d": _G,
    "icd.d": _G,  # vulkan/icd.d, vulkansc/icd.d
    "implicit_layer.d": _G,
    "explicit_layer.d": _G,
    "xorg.conf.d": _D,
}

_COMPAT32_DIRS = frozenset({"lib32", "i386-linux-gnu", "i686-linux-gnu", "arm-linux-gnueabihf"})
_FIRMWARE_DIR = "firmware"


def _stem(name: str) -> str:
    """``name`` up to the first ``.so`` that ends it or is followed by a dot (``.sock`` does not count)."""
    start = name.find(".so")
    while start > 0:
        end = start + 3
        if end == len(name) or name[end] == ".":
            return name[:start]
        start = name.find(".so", end)
    return name


def classify(container_path: str) -> tuple[tuple[str, ...], bool]:
    """The capabilities any one of which keeps the file (none: always kept), and whether it is 32-bit."""
    parts = container_path.rstrip("/").split("/")
    name = parts[-1]
    dirs = parts[:-1]
    if _FIRMWARE_DIR in dirs:
        return _ALWAYS, False
    is32 = not _COMPAT32_DIRS.isdisjoint(dirs)
    stem = _stem(name)
    owners = _BY_STEM.get(stem)
    if owners is not None:
        return owners, is32
    for prefix, family in _BY_PREFIX:
        if stem.startswith(prefix):
            return family, is32
    for suffix, kind in _BY_SUFFIX:
        if name.endswith(suffix):
            return kind, is32
    if dirs:
        owners = _BY_DIR.get(dirs[-1])
        if owners is not None:
            return owners, is32
    return _ALWAYS, is32


def effective_capabilities(capabilities: Iterable[str]) -> frozenset[str]:
    """``capabilities`` with what they imply: ``all`` is every capability, ``display`` brings ``graphics``."""
    wanted = frozenset(capabilities)
    if "all" in wanted:
        return _EVERY
    if DISPLAY in wanted and GRAPHICS not in wanted:
        wanted |= {GRAPHICS}
    return wanted


def _keep(container_path: str, wanted: frozenset[str]) -> bool:
    owners, is32 = classify(container_path)
    if is32 and COMPAT32 not in wanted:
        return False
    if not owners:
        return True
    return any(owner in wanted for owner in owners)


def select_mounts(mounts: list[dict[str, Any]], capabilities: frozenset[str]) -> list[dict[str, Any]]:
    """The mounts (the spec's JSON shape) a container asking for ``capabilities`` gets, in their order."""
    wanted = effective_capabilities(capabilities)
    return [mount for mount in mounts if _keep(mount["containerPath"], wanted)]
