"""What the NVIDIA kernel modules say about themselves in procfs.

``/proc/devices`` gives the character majors, ``/proc/modules`` the loaded modules,
``/proc/driver/nvidia/version`` the driver version, ``/proc/driver/nvidia/gpus/*/information`` the GPUs
when NVML is not there, and ``/proc/driver/nvidia-caps/mig-minors`` the minors of the MIG capability
nodes. Every reader takes ``Roots`` and reads at most ``MAX_PROC_BYTES``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cdictk.node.roots import NVIDIA_MODULES, Roots, read_text

_KERNEL_MODULE = "Kernel Module"
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
    """The ``N.N[.N]`` after whitespace after the first ``Kernel Module`` (or ``Kernel Module for
    <word>``) that has one; None when none has. Any str is accepted.

    (str methods, not re: re costs every generate 1.5 ms to import. It reads the text as the regex
    ``Kernel Module(?:\\s+for\\s+\\S+)?\\s+(\\d+\\.\\d+(?:\\.\\d+)?)\\b`` searched, held to it in a test.)
    """
    at = text.find(_KERNEL_MODULE)
    while at != -1:
        version = _version_after_kernel_module(text, at + len(_KERNEL_MODULE))
        if version is not None:
            return version
        at = text.find(_KERNEL_MODULE, at + 1)
    return None


def _run_end(text: str, at: int, test: Callable[[str], bool]) -> int:
    """Where the run of characters that pass ``test`` from ``at`` ends (``at`` when there is none)."""
    while at < len(text) and test(text[at]):
        at += 1
    return at


def _not_space(char: str) -> bool:
    return not char.isspace()


def _version_after_kernel_module(text: str, at: int) -> str | None:
    """The version after ``Kernel Module`` that ends at ``at``: after ``for <word>`` if that fits, else
    right after the whitespace."""
    spaces = _run_end(text, at, str.isspace)
    if spaces == at:
        return None
    if text.startswith("for", spaces):
        word = _run_end(text, spaces + 3, str.isspace)
        word_end = _run_end(text, word, _not_space)
        version = _run_end(text, word_end, str.isspace)
        if spaces + 3 < word < word_end < version:
            found = _version_at(text, version)
            if found is not None:
                return found
    return _version_at(text, spaces)


def _version_at(text: str, at: int) -> str | None:
    """``N.N.N`` or ``N.N`` (N: decimal digits, "٣" too) at ``at``, not followed by a word character;
    ``580.95.05x`` gives ``580.95``, as the regex's backtracking did (a "." ends a word)."""
    major = _run_end(text, at, str.isdecimal)
    minor = _run_end(text, major + 1, str.isdecimal)
    if major == at or text[major : major + 1] != "." or minor == major + 1:
        return None
    if text[minor : minor + 1] == ".":
        patch = _run_end(text, minor + 1, str.isdecimal)
        if patch > minor + 1 and not _is_word_char(text[patch : patch + 1]):
            return text[at:patch]
        return text[at:minor]
    return None if _is_word_char(text[minor : minor + 1]) else text[at:minor]


def _is_word_char(char: str) -> bool:
    """re's ``\\w`` for one character; False for "" (the end of the text)."""
    return char.isalnum() or char == "_"


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
    that are not in MIG mode before a line is parsed.
    """
    config = monitor = None
    access: dict[tuple[int, int, int | None], int] = {}
    wanted = tuple(f"gpu{gpu}/" for gpu in sorted(gpus)) if gpus is not None else ("gpu",)
    for line in text.splitlines():
        if line.startswith(wanted):
            if (parsed := _mig_access_line(line.rstrip())) is not None:
                gpu, gi, ci, minor = parsed
                access[(gpu, gi, ci)] = minor
        elif line.startswith(("config ", "monitor ")):
            name, _, value = line.partition(" ")
            if _small_number(value.strip(), MAX_MINOR):
                if name == "config":
                    config = int(value)
                else:
                    monitor = int(value)
    return MigMinors(config, monitor, access)


def _mig_access_line(line: str) -> tuple[int, int, int | None, int] | None:
    """``gpu<G>/gi<I>[/ci<C>]/access<whitespace><minor>``, whole (G: 1-4 ASCII digits, I and C: 1-3,
    minor: 1-7) -> (G, I, C or None, minor); None for any other str. (str methods, not re, as in
    parse_driver_version.)"""
    fields = line.split()  # splits where re's \s+ would, and drops whitespace at the ends: not allowed
    if len(fields) != 2 or not line.startswith("gpu") or line[-1].isspace():
        return None
    names = fields[0].split("/")
    if len(names) not in (3, 4) or names[-1] != "access" or names[1][:2] != "gi":
        return None
    gpu, gi, minor = names[0][3:], names[1][2:], fields[1]
    ci = names[2][2:] if len(names) == 4 else "0"  # "0" when there is none: it passes the checks
    digits = gpu + gi + ci + minor
    if not (
        0 < len(gpu) <= 4
        and 0 < len(gi) <= 3
        and 0 < len(ci) <= 3
        and 0 < len(minor) <= 7
        and digits.isascii()
        and digits.isdigit()
    ):
        return None
    if len(names) == 3:
        return int(gpu), int(gi), None, int(minor)
    return (int(gpu), int(gi), int(ci), int(minor)) if names[2][:2] == "ci" else None


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
