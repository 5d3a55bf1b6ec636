"""What the NVIDIA kernel modules say about themselves in procfs.

``/proc/devices`` gives the character majors, ``/proc/modules`` the loaded modules,
``/proc/driver/nvidia/version`` the driver version, ``/proc/driver/nvidia/gpus/*/information`` the GPUs
when NVML is not there, and ``/proc/driver/nvidia-caps/mig-minors`` the minors of the MIG capability
nodes. Every reader takes ``Roots`` and reads at most ``MAX_PROC_BYTES``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from cdictk.startpath.helpers.roots import NVIDIA_MODULES, Roots, read_text

_MIG_LINE = re.compile(r"gpu([0-9]{1,4})/gi([0-9]{1,3})(?:/ci([0-9]{1,3}))?/access\s+([0-9]{1,7})")
_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)\b")
MAX_MAJOR = 4095  # the kernel's device numbers: 12-bit majors, 20-bit minors
MAX_MINOR = (1 << 20) - 1


def _small_number(text: str, limit: int) -> bool:
    """ASCII digits only (``isdigit`` takes "²") and within ``limit``: os.makedev must accept it."""
    return 0 < len(text) <= 7 and text.isascii() and text.isdigit() and int(text) <= limit


def parse_devices(text: str) -> dict[str, int]:
    """Character device majors by name, from the first section of /proc/devices."""
    majors: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        if line.startswith("Character devices"):
            in_char = True
            continue
        if line.startswith("Block devices"):
            break
        fields = line.split()
        if in_char and len(fields) == 2 and _small_number(fields[0], MAX_MAJOR):
            majors.setdefault(fields[1], int(fields[0]))
    return majors


def read_char_majors(roots: Roots) -> dict[str, int]:
    text = read_text(roots.in_proc("devices"))
    return parse_devices(text) if text is not None else {}


def parse_modules(text: str) -> set[str]:
    return {line.split(maxsplit=1)[0] for line in text.splitlines() if line.strip()}


def read_loaded_modules(roots: Roots) -> set[str] | None:
    """The NVIDIA modules that are loaded, or None when /proc/modules cannot be read."""
    text = read_text(roots.in_proc("modules"))
    if text is None:
        return None
    return parse_modules(text) & set(NVIDIA_MODULES)


def parse_driver_version(text: str) -> str | None:
    """The version after the first ``Kernel Module`` (or ``Kernel Module for <word>``) that has one."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def read_driver_version(roots: Roots) -> str | None:
    text = read_text(roots.in_proc("driver/nvidia/version"))
    return parse_driver_version(text) if text is not None else None


@dataclass(frozen=True, slots=True)
class ProcGpu:
    """One GPU as the kernel module lists it."""

    model: str
    uuid: str
    bus_id: str  # sysfs form, e.g. 0000:18:00.0
    minor: int


def parse_gpu_information(text: str) -> ProcGpu | None:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    minor = values.get("Device Minor", "")
    bus = values.get("Bus Location", "")
    if not _small_number(minor, MAX_MINOR) or not bus:
        return None
    return ProcGpu(values.get("Model", ""), values.get("GPU UUID", ""), bus.lower(), int(minor))


def read_proc_gpus(roots: Roots) -> list[ProcGpu]:
    """Every GPU under /proc/driver/nvidia/gpus, in PCI bus order (the order NVML numbers them)."""
    base = roots.in_proc("driver/nvidia/gpus")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    gpus = []
    for name in names:
        text = read_text(os.path.join(base, name, "information"))
        gpu = parse_gpu_information(text) if text is not None else None
        if gpu is not None:
            gpus.append(gpu)
    return sorted(gpus, key=lambda gpu: gpu.bus_id)


@dataclass(frozen=True, slots=True)
class MigMinors:
    """Minors of the nvidia-caps nodes: MIG config and monitor, and per GPU-/compute-instance access."""

    config: int | None = None
    monitor: int | None = None
    # (GPU minor, GPU-instance id, compute-instance id or None for the GPU instance) -> cap minor
    access: dict[tuple[int, int, int | None], int] = field(default_factory=dict)


def parse_mig_minors(text: str, gpus: set[int] | None = None) -> MigMinors:
    """The cap minors, for the GPU minors in ``gpus`` only when given.

    The file lists every possible instance of 32 GPUs (~4,300 lines); a prefix test skips the GPUs
    that are not in MIG mode before any regex runs.
    """
    config = monitor = None
    access: dict[tuple[int, int, int | None], int] = {}
    wanted = tuple(f"gpu{gpu}/" for gpu in sorted(gpus)) if gpus is not None else ("gpu",)
    for line in text.splitlines():
        if line.startswith(wanted):
            if match := _MIG_LINE.fullmatch(line.rstrip()):
                gpu, gi, ci, minor = match.groups()
                access[(int(gpu), int(gi), None if ci is None else int(ci))] = int(minor)
        elif line.startswith(("config ", "monitor ")):
            name, _, value = line.partition(" ")
            if _small_number(value.strip(), MAX_MINOR):
                if name == "config":
                    config = int(value)
                else:
                    monitor = int(value)
    return MigMinors(config, monitor, access)


def read_mig_minors(roots: Roots, gpus: set[int] | None = None) -> MigMinors | None:
    text = read_text(roots.in_proc("driver/nvidia-caps/mig-minors"))
    return parse_mig_minors(text, gpus) if text is not None else None


def has_gpu_instances(roots: Roots, minor: int) -> bool:
    """Whether the driver lists GPU instances of the GPU with ``minor``
    (``/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<N>``): the GPU is in MIG mode. (A GPU in MIG
    mode without instances lists none: procfs cannot tell it from a full GPU.)"""
    try:
        names = os.listdir(roots.in_proc(f"driver/nvidia/capabilities/gpu{minor}/mig"))
    except OSError:
        return False
    return any(name.startswith("gi") and name[2:].isdigit() for name in names)
