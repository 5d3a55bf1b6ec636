"""WSL2: the GPU behind ``/dev/dxg`` and the Windows driver's Linux files in its driver store.

Windows hands a WSL2 distribution ``/usr/lib/wsl/lib`` (``libdxcore.so``, the loader of the GPU
paravirtualisation) and the driver store, ``/usr/lib/wsl/drivers/<driver package>/``, which holds the
NVIDIA driver's Linux libraries (``libcuda.so.1.1``) beside its Windows files. NVIDIA's generator asks
dxcore for the store's path; we scan the stores for the one holding ``libcuda.so.1.1``, which needs
no library loaded. There is no ``/proc/driver/nvidia`` on WSL: the driver version comes from NVML
when it answers, else from a versioned library's name in the store, and is never required. The NVML
asked is the one the loader takes, ``libnvidia-ml.so.1`` of ``/usr/lib/wsl/lib`` (WSL lists that
directory in ``ld.so.conf.d``), only when it and the ``libdxcore.so`` it opens are root's alone
(:func:`cdictk.node.nvmllib.nvml_library`), never a file found by listing a store.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from cdictk.node.libchoice import LibraryError
from cdictk.node.libraries import usable_name
from cdictk.node.nvml import query_nvml
from cdictk.node.nvmllib import NvmlError, nvml_library
from cdictk.sorting import natural_key
from cdictk.startpath.helpers.roots import Roots, join, resolve

WSL_LIB = "/usr/lib/wsl/lib"
DXCORE = "libdxcore.so"
DRIVERS = "/usr/lib/wsl/drivers"
LIBCUDA = "libcuda.so.1.1"
DXG = "/dev/dxg"
NVIDIA_SMI = "nvidia-smi"
NVML = "libnvidia-ml.so.1"
# What CUDA and NVML need from the store; every other *.so*, *.bin and *.dll there comes too.
STORE_FILES = (
    LIBCUDA,
    "libcuda_loader.so",
    "libnvidia-ptxjitcompiler.so.1",
    NVML,
    "libnvidia-ml_loader.so",
    "libnvdxgdmal.so.1",
    "nvcubins.bin",
    NVIDIA_SMI,
)
_OTHER_FILES = re.compile(r".+\.so(\..*)?|.+\.bin|.+\.dll")
_LIBRARY = re.compile(r"lib.+\.so(\..*)?")
_VERSIONED = re.compile(r"lib[\w.+-]+\.so\.([1-9][0-9]{2}\.[0-9]+(?:\.[0-9]+)?)")


@dataclass(slots=True)
class WslFound:
    libraries: list[str] = field(default_factory=list)  # in the driver root: the ld cache gets their dirs
    files: list[str] = field(default_factory=list)  # the store's other files (nvcubins.bin, nvidia-smi)
    links: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _regular(roots: Roots, path: str) -> str | None:
    """``path`` resolved inside the driver root when it is a regular file there."""
    real = resolve(roots.driver, path)
    if real is None:
        return None
    try:
        return real if stat.S_ISREG(os.lstat(join(roots.driver, real)).st_mode) else None
    except OSError:
        return None


def has_dxcore(roots: Roots) -> bool:
    return _regular(roots, f"{WSL_LIB}/{DXCORE}") is not None


def driver_stores(roots: Roots) -> list[str]:
    """The driver stores (inside the driver root) that hold ``libcuda.so.1.1``, in natural order."""
    real = resolve(roots.driver, DRIVERS)
    if real is None:
        return []
    try:
        names = sorted(os.listdir(join(roots.driver, real)), key=natural_key)
    except OSError:
        return []
    stores = []
    for name in names:
        found = _regular(roots, f"{real}/{name}/{LIBCUDA}")
        if usable_name(name) and found is not None:
            stores.append(os.path.dirname(found))
    return list(dict.fromkeys(stores))


def find_driver(roots: Roots) -> WslFound | None:
    """libdxcore.so and the NVIDIA store's files; None when no store holds libcuda.so.1.1."""
    stores = driver_stores(roots)
    if not stores:
        return None

    store = stores[0]
    found = WslFound()
    if len(stores) > 1:
        found.warnings.append(f"several NVIDIA driver stores, using the first: {', '.join(stores)}")
    dxcore = _regular(roots, f"{WSL_LIB}/{DXCORE}")
    if dxcore is None:
        found.missing.append(f"{WSL_LIB}/{DXCORE}")
    else:
        found.libraries.append(dxcore)
    try:
        names = sorted(os.listdir(join(roots.driver, store)), key=natural_key)
    except OSError:
        names = []
    for name in STORE_FILES:
        if name not in names:
            found.missing.append(f"{store}/{name}")
    for name in names:
        if not usable_name(name) or not (name in STORE_FILES or _OTHER_FILES.fullmatch(name)):
            continue
        path = _regular(roots, f"{store}/{name}")
        if path is None or os.path.dirname(path) != store:  # a link out of the store is not the driver's
            continue
        (found.libraries if _LIBRARY.fullmatch(name) else found.files).append(path)
        if name == NVIDIA_SMI:
            # On PATH in every image, pointing at the store, as the Windows driver's own WSL setup has it.
            found.links.append((path, "/usr/bin/nvidia-smi"))
    return found


def driver_version(roots: Roots, warnings: list[str]) -> str:
    """The driver version from NVML, else from a versioned library's name in the store; "" if neither."""
    stores = driver_stores(roots)
    if not stores:
        return ""
    store = stores[0]
    try:
        return query_nvml(nvml_library(roots.driver)).version
    except LibraryError as exc:
        if exc.refused:
            warnings.append(f"{exc}; the driver version comes from the store's file names")
    except NvmlError as exc:
        warnings.append(f"{exc}; the driver version comes from the store's file names")
    try:
        names = os.listdir(join(roots.driver, store))
    except OSError:
        names = []

    versions = [match.group(1) for name in names if (match := _VERSIONED.fullmatch(name))]
    return max(versions, key=natural_key, default="")
