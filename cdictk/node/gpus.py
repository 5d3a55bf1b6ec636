"""The node's GPUs and MIG devices, as discovery reports them (from NVML or from procfs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cdictk.node.procfs import ProcGpu

_PROFILE = re.compile(r"(?:\d+c\.)?\d+g\.\d+gb(?:\+\w+)*")
_SHARED = re.compile(r"(\d+)c\.(\d+)g\.")  # a compute instance's slices, then its GPU instance's


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """What NVML says of a MIG device's GPU instance: its profile's ID (``19`` for an H100's 1g.10gb,
    not the NVML_GPU_INSTANCE_PROFILE_* index), where it sits among the GPU's memory slices, and its
    profile's sizes (nvmlGpuInstanceProfileInfo_t). What names a MIG device for DRA."""

    profile_id: int
    placement_start: int  # the first memory slice it occupies
    placement_size: int  # how many
    memory_mb: int  # the profile's memory, in MiB (nvml.h: "memorySizeMB ... (in MiB)")
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_decoders: int
    ofas: int


@dataclass(frozen=True, slots=True)
class MigDevice:
    parent_index: int
    index: int  # NVML's MIG slot on the parent, as in "0:1" (slots can have holes)
    gi: int  # GPU-instance id
    ci: int  # compute-instance id
    uuid: str
    profile: str  # e.g. 1g.10gb, or 1c.2g.20gb when the compute instance is smaller
    # NVML's attributes of the MIG device (what node labels describe; 0 where NVML gave none).
    memory_mb: int = 0
    multiprocessors: int = 0
    gi_slices: int = 0
    ci_slices: int = 0
    copy_engines: int = 0  # shared with the other compute instances of its GPU instance, as the rest
    decoders: int = 0
    encoders: int = 0
    jpeg_decoders: int = 0
    ofas: int = 0  # optical flow accelerators
    instance: GpuInstance | None = None  # None: NVML would not say (no permission to ask)

    @property
    def whole_instance(self) -> bool:
        """Whether its compute instance spans its GPU instance (``2g.20gb``, not ``1c.2g.20gb``)."""
        counts = _SHARED.match(self.profile)
        return counts is None or counts[1] == counts[2]


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    minor: int
    uuid: str
    bus_id: str  # sysfs form: 0000:18:00.0
    name: str
    mig_enabled: bool = False
    migs: tuple[MigDevice, ...] = field(default_factory=tuple)
    # What NVML says beside (node labels); procfs knows none of it.
    mig_capable: bool = False  # NVML answers its MIG mode (NOT_SUPPORTED: not capable)
    memory_bytes: int = 0  # total memory; 0: unknown
    compute_capability: tuple[int, int] = (0, 0)  # CUDA's (major, minor); (0, 0): unknown
    brand: int | None = None  # nvmlBrandType_t; None: unknown
    architecture: int | None = None  # nvmlDeviceArchitecture_t; None: unknown

    @property
    def memory_mib(self) -> int:
        return self.memory_bytes >> 20


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as sysfs spells it: ``0000:18:00.0``."""
    domain, sep, rest = nvml_bus_id.strip().lower().partition(":")
    if not sep:
        return nvml_bus_id.lower()
    return f"{int(domain, 16):04x}:{rest}" if domain else rest


def mig_profile(name: str, gi_slices: int, ci_slices: int, memory_mb: int) -> str:
    """The profile NVML puts at the end of a MIG device's name, else one computed from its attributes."""
    last = name.rsplit(" ", 1)[-1]
    if _PROFILE.fullmatch(last):
        return last
    gigabytes = (memory_mb + 1023) // 1024
    profile = f"{gi_slices}g.{gigabytes}gb"
    return profile if ci_slices in (0, gi_slices) else f"{ci_slices}c.{profile}"


def gpus_from_procfs(proc_gpus: list[ProcGpu]) -> list[Gpu]:
    """Full GPUs numbered in PCI bus order, as NVML numbers them; procfs knows nothing of MIG."""
    return [
        Gpu(index, gpu.minor, gpu.uuid, gpu.bus_id, gpu.model)
        for index, gpu in enumerate(sorted(proc_gpus, key=lambda gpu: gpu.bus_id))
    ]


@dataclass(frozen=True, slots=True)
class NvmlAnswer:
    """What :func:`cdictk.node.nvml.query_nvml` found. Here rather than beside it: that module is
    imported before NVML's child is forked, and importing dataclasses there would delay the fork."""

    version: str
    gpus: list[Gpu]
    left_out: list[str]  # one line per GPU NVML could not describe: "GPU 3: GPU is lost"
    cuda_version: int = 0  # nvmlSystemGetCudaDriverVersion: 13000 for CUDA 13.0; 0: unknown
