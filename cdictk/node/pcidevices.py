"""What sysfs says of the node's NVIDIA PCI functions: a GPU's PCI class, NUMA node and PCIe root, and
which functions are vGPUs (a virtual GPU shows its host's driver in a vendor-specific capability of its
configuration space).

Read from ``<sys>/bus/pci/devices/<bus id>/``: ``vendor``, ``class``, ``numa_node`` and ``config``, and
the link itself, which points into ``<sys>/devices/pci<domain>:<bus>/`` under the function's root
complex. An unprivileged
reader gets the first 64 bytes of ``config`` only, where no capability list fits: then which function is
a vGPU cannot be told, and :func:`vgpu_scan` says so with None rather than "none".
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from cdictk.startpath.helpers.roots import Roots, read_text

NVIDIA_VENDOR = 0x10DE
VGA_CLASS = 0x030000  # a GPU with its display engine on: graphics mode
COMPUTE_CLASS = 0x030200  # a 3D controller: the data-center GPUs, compute mode
CONFIG_SIZE = 256  # the conventional configuration space, where the capability list is
_CAPABILITY_LIST = 0x34
_STATUS = 0x06
_HAS_CAPABILITIES = 0x10
_VENDOR_SPECIFIC = 0x09
_VGPU_SIGNATURE = b"VF"  # bytes 3 and 4 of a vGPU's vendor-specific capability
_RECORDS_START = 5  # the capability's records: id, length, data
_VERSION_BYTES = 10  # the host driver record (id 0): its version, then its branch, NUL-padded
_BUS_ID = re.compile(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")  # sysfs' form, nothing to walk out of
_ROOT_COMPLEX = re.compile(r"pci[0-9a-f]{4,}:[0-9a-f]{2}")  # 5 digits for a VMD domain


@dataclass(frozen=True, slots=True)
class VgpuHost:
    """What a vGPU's capability says of the host's driver: ``550.54.16``, ``r550_40`` ("" unknown)."""

    address: str
    driver_version: str
    driver_branch: str


def devices_dir(roots: Roots) -> str:
    return os.path.join(roots.sys, "bus/pci/devices")


def pci_class(roots: Roots, bus_id: str) -> int | None:
    """The 24-bit PCI class of the function at ``bus_id`` (sysfs form), None when unreadable."""
    return _number(read_text(os.path.join(devices_dir(roots), bus_id, "class")))


def numa_node(roots: Roots, bus_id: str) -> int | None:
    """The NUMA node of the function at ``bus_id``; None when sysfs says -1 (no NUMA) or nothing."""
    if not _BUS_ID.fullmatch(bus_id):
        return None
    node = _number(read_text(os.path.join(devices_dir(roots), bus_id, "numa_node")))
    return node if node is not None and node >= 0 else None


def pcie_root(roots: Roots, bus_id: str) -> str | None:
    """The PCIe root complex the function at ``bus_id`` hangs off, as sysfs names its directory
    (``pci0000:64``): the first step of the path its link under ``bus/pci/devices`` points to
    (``../../../devices/pci0000:64/0000:64:00.0/0000:65:00.0``). None when that link is missing or
    points elsewhere; the link is read, never followed."""
    if not _BUS_ID.fullmatch(bus_id):
        return None
    try:
        target = os.readlink(os.path.join(devices_dir(roots), bus_id))
    except OSError:
        return None
    if os.path.isabs(target):
        return None
    parts = os.path.normpath(os.path.join("bus/pci/devices", target)).split("/")
    if (
        len(parts) < 3
        or parts[0] != "devices"
        or parts[-1] != bus_id
        or not _ROOT_COMPLEX.fullmatch(parts[1])
    ):
        return None
    return parts[1]


def vgpu_scan(roots: Roots) -> list[VgpuHost] | None:
    """The node's NVIDIA functions that are vGPUs, with what their host runs; None when one NVIDIA
    function's vendor, class or whole configuration space cannot be read (an unprivileged reader)."""
    top = devices_dir(roots)
    try:
        addresses = sorted(os.listdir(top))
    except OSError:
        return None
    found = []
    for address in addresses:
        vendor = _number(read_text(os.path.join(top, address, "vendor")))
        if vendor is None:
            return None
        if vendor != NVIDIA_VENDOR:
            continue
        config = _read_config(os.path.join(top, address, "config"))
        if config is None or pci_class(roots, address) is None:
            return None
        capability = _vendor_capability(config)
        if capability is not None and capability[3:5] == _VGPU_SIGNATURE:
            version, branch = _host_driver(capability)
            found.append(VgpuHost(address, version, branch))
    return found


def _read_config(path: str) -> bytes | None:
    """Its first 256 bytes, None when fewer can be read (sysfs gives others than root 64)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO planted in a fake root must not hang
            return None
        data = os.pread(fd, CONFIG_SIZE, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == CONFIG_SIZE else None


def _vendor_capability(config: bytes) -> bytes | None:
    """The first vendor-specific capability (id, next, length, data...), None when there is none."""
    if not config[_STATUS] & _HAS_CAPABILITIES:
        return None
    seen = set()
    at = config[_CAPABILITY_LIST]
    while at and at not in seen and at + 2 < CONFIG_SIZE:
        seen.add(at)
        if config[at] == 0xFF:
            break
        if config[at] == _VENDOR_SPECIFIC:
            return config[at : at + config[at + 2]]
        at = config[at + 1]
    return None


def _host_driver(capability: bytes) -> tuple[str, str]:
    """The host driver record's version and branch, found by walking the records from their start."""
    at = _RECORDS_START
    while at < len(capability) and capability[at] != 0:
        length = capability[at + 1] if at + 1 < len(capability) else 0
        if length == 0:
            return "", ""
        at += length
    end = at + 2 + 2 * _VERSION_BYTES
    if at >= len(capability) or end > len(capability):
        return "", ""
    data = capability[at + 2 : end]
    return _text(data[:_VERSION_BYTES]), _text(data[_VERSION_BYTES:])


def _text(data: bytes) -> str:
    return data.strip(b"\0").decode("ascii", "replace")


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None
