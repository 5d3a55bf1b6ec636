"""A fake ``libnvidia-ml.so`` (``fake_nvml.c``) and the config that tells it which devices to report.

The library reads ``fake-nvml.conf`` from its own directory at every first ``nvmlInit`` (or the file
named by ``FAKE_NVML_CONFIG``), so a test writes the config next to the library and may rewrite it
between an ``nvmlShutdown`` and the next ``nvmlInit``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

CONFIG_NAME = "fake-nvml.conf"
EVENTS_NAME = "fake-nvml.events"  # appended to at run time: Xid errors, GPUs lost and recovered
MIG_MODES = ("disabled", "enabled", "unsupported")
# nvmlBrandType_t values from nvml.h (a few of them; any number may be configured).
NVML_BRAND_UNKNOWN = 0
NVML_BRAND_QUADRO = 1
NVML_BRAND_TESLA = 2
NVML_BRAND_GEFORCE = 5
NVML_BRAND_NVIDIA_RTX = 13
NVML_BRAND_NVIDIA = 14  # what an H100 reports ("Product Brand: NVIDIA")
NVML_BRAND_GEFORCE_RTX = 15

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_nvml.c")
# The version becomes part of a file name and of the gcc command line.
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]*")
# Unquoted values end at whitespace; the C parser has no escapes, so '"' and line breaks cannot be written.
_NEEDS_QUOTES = re.compile(r"[\s#]|^$")
_ENGINE_KEYS = ("ce", "dec", "enc", "jpeg", "ofa")


@dataclass(frozen=True)
class FakeGpu:
    index: int
    minor: int
    uuid: str
    bus_id: str  # NVML's form, 00000000:18:00.0
    name: str
    mig: str = "disabled"  # one of MIG_MODES
    max_mig: int = 7
    arch: str = "9.0"  # CUDA compute capability, major.minor (an H100's)
    arch_id: int | None = None  # nvmlDeviceGetArchitecture's NVML_DEVICE_ARCH_*; None: arch's generation's
    brand: int = NVML_BRAND_NVIDIA  # an nvmlBrandType_t value
    lost: bool = False  # nvmlDeviceGetHandleByIndex (and ByUUID) answer "GPU is lost", as after an Xid 79
    memory_mb: int = 81559  # total memory (nvmlDeviceGetMemoryInfo), an H100 80GB HBM3's
    numa: int | None = None  # NUMA node (also sysfs numa_node); None: topology not supported
    pcisw: int | None = None  # the PCIe switch it hangs off; GPUs on one switch are TOPOLOGY_SINGLE
    pci_class: int = 0x030200  # its PCI class in sysfs (not NVML's): a 3D controller; 0x030000 is VGA


@dataclass(frozen=True)
class FakeMig:
    gpu: int
    index: int  # the slot under nvmlDeviceGetMigDeviceHandleByIndex
    gi: int
    ci: int
    uuid: str
    name: str  # ends in the profile, as NVML's: "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"; it must agree with the slices
    gi_slices: int
    ci_slices: int
    memory_mb: int
    sms: int = 14
    engines: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # shared copy, decoder, encoder, JPEG, OFA


@dataclass
class FakeNvmlConfig:
    driver_version: str
    cuda_version: int  # 13000 for CUDA 13.0
    gpus: list[FakeGpu]
    migs: list[FakeMig]
    init_error: int = 0  # an NVML_ERROR_* code that nvmlInit returns instead of succeeding
    init_hang: bool = False  # nvmlInit never returns, as with a driver stuck in the kernel
    events: bool = True  # False: nvmlEventSetCreate answers NOT_SUPPORTED (an NVML without events)
    nvlinks: list[tuple[int, int, int]] = field(default_factory=list)  # (gpu, link, peer gpu), per direction

    def render(self) -> str:
        lines = [f"driver version={_value(self.driver_version)} cuda={self.cuda_version}"]
        if self.init_error or self.init_hang:
            lines.append(f"init error={self.init_error} hang={int(self.init_hang)}")
        if not self.events:
            lines.append("events supported=0")
        for gpu in self.gpus:
            if gpu.mig not in MIG_MODES:
                raise ValueError(f"FakeGpu {gpu.index}: mig must be one of {MIG_MODES}, not {gpu.mig!r}")
            lines.append(
                f"gpu index={gpu.index} minor={gpu.minor} uuid={_value(gpu.uuid)} bus={_value(gpu.bus_id)}"
                f" name={_value(gpu.name)} mig={gpu.mig} maxmig={gpu.max_mig}"
                f" arch={_value(gpu.arch)} brand={gpu.brand} lost={int(gpu.lost)} memmb={gpu.memory_mb}"
                + (f" archid={gpu.arch_id}" if gpu.arch_id is not None else "")
                + (f" numa={gpu.numa}" if gpu.numa is not None else "")
                + (f" pcisw={gpu.pcisw}" if gpu.pcisw is not None else "")
            )
        for mig in self.migs:
            lines.append(
                f"mig gpu={mig.gpu} index={mig.index} gi={mig.gi} ci={mig.ci} uuid={_value(mig.uuid)}"
                f" name={_value(mig.name)} gislices={mig.gi_slices} cislices={mig.ci_slices}"
                f" memmb={mig.memory_mb} sms={mig.sms}"
                + "".join(
                    f" {key}={count}" for key, count in zip(_ENGINE_KEYS, mig.engines, strict=True) if count
                )
            )
        lines += [f"nvlink gpu={gpu} link={link} peer={peer}" for gpu, link, peer in self.nvlinks]
        return "\n".join(lines) + "\n"

    def write(self, directory: str) -> str:
        """Write the config where a library in ``directory`` looks for it; return its path."""
        path = os.path.join(directory, CONFIG_NAME)
        with open(path, "w", encoding="utf-8") as out:
            out.write(self.render())
        return path


def _value(text: str) -> str:
    if '"' in text or "\n" in text or "\r" in text or "\0" in text:
        raise ValueError(f"cannot write {text!r} in a fake-nvml config")
    return f'"{text}"' if _NEEDS_QUOTES.search(text) else text


def build_fake_nvml(out_dir: str, driver_version: str, cache_dir: str | None = None) -> str:
    """Build ``<out_dir>/libnvidia-ml.so.<driver_version>`` (SONAME ``libnvidia-ml.so.1``); return its path.

    With ``cache_dir``, gcc runs once per source text and version and later calls copy that build.
    """
    if not _VERSION.fullmatch(driver_version):
        raise ValueError(f"bad driver version {driver_version!r}")
    name = f"libnvidia-ml.so.{driver_version}"
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, name)
    if cache_dir is None:
        _compile(target)
        return target
    with open(_SOURCE, "rb") as source:
        key = hashlib.sha256(source.read()).hexdigest()[:16]
    cached = os.path.join(cache_dir, f"fake-nvml-{key}", name)
    if not os.path.exists(cached):
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        # Built under a unique name and renamed, so that concurrent test workers never copy half a file.
        fd, scratch = tempfile.mkstemp(prefix=".build-", dir=os.path.dirname(cached))
        os.close(fd)
        try:
            _compile(scratch)
            os.chmod(scratch, 0o755)  # mkstemp made it 0600
            os.replace(scratch, cached)
        finally:
            if os.path.exists(scratch):
                os.unlink(scratch)
    shutil.copy2(cached, target)
    return target


def _compile(output: str) -> None:
    command = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wl,-soname,libnvidia-ml.so.1",
        "-o",
        output,
        _SOURCE,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed ({' '.join(command)}):\n{result.stderr}")


def append_event(directory: str, line: str) -> None:
    """Tell a running fake NVML in ``directory`` of an event: ``xid gpu=N xid=X [gi= ci=]``, ``lost gpu=N``
    or ``recover gpu=N`` (fake_nvml.c reads the file from where it stopped, at every event wait and
    handle lookup)."""
    with open(os.path.join(directory, EVENTS_NAME), "a", encoding="utf-8") as out:
        out.write(line.rstrip("\n") + "\n")
