"""The labels of a node, by the rules of NVIDIA's GPU feature discovery (GFD), from a :class:`NodeView`.

Names and values are GFD's, the deprecated duplicates it still writes included:

- ``nvidia.com/cuda.driver-version.*`` and ``cuda.runtime-version.*`` (with ``cuda.driver.*`` and
  ``cuda.runtime.*``), from NVML's driver and CUDA versions;
- ``nvidia.com/gpu.machine``: the DMI product name, sanitised (``unknown`` when unreadable);
- ``nvidia.com/mig.capable``, ``mps.capable`` (always false: cdictk shares by time-slicing only),
  ``gpu.mode`` (``compute``, ``graphics`` or ``unknown``, from the GPUs' PCI classes), ``vgpu.*``;
- the resource labels ``<resource>.product``, ``.count``, ``.replicas``, ``.sharing-strategy``,
  ``.memory``, ``.family``, ``.compute.major``/``.minor`` for ``nvidia.com/gpu``; with MIG strategy
  ``single`` the MIG devices' in their place (or ``<name>-MIG-INVALID`` when the node cannot be
  offered so), with ``mixed`` a set per profile as ``nvidia.com/mig-<profile>``, each with the MIG
  device's attributes (multiprocessors, slices, engines);
- ``nvidia.com/gpu.present=true``, which GFD leaves to NVIDIA's GPU operator.

Where GFD's choice depends on Go's map order (several GPU models on one node: which one's labels
``nvidia.com/gpu.*`` carry), the lowest-numbered GPU's model is taken. GPUs NVML cannot describe are
left out here; GFD would fail.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cdictk.labels.nodeview import NodeView
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.node.pcidevices import COMPUTE_CLASS, VGA_CLASS
from cdictk.startpath.helpers.errors import CdictkError

DOMAIN = "nvidia.com"
FULL_GPU = f"{DOMAIN}/gpu"
MIG_STRATEGIES = ("none", "single", "mixed")
_NOT_SANITISED = re.compile(r"[^A-Za-z0-9\-_. ]")
# CUDA compute capability major -> GPU family (GFD's table; 7 and 8 split by their minor).
_FAMILIES = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell"}
_FAMILIES |= {12: "blackwell", 13: "rubin"}

Labels = dict[str, str]


class LabelError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "", reason)


@dataclass(frozen=True, slots=True)
class Sharing:
    """Time-slicing as the device plugin's settings give it: replicas by resource name. GFD ignores a
    rule's own ``rename``; ``renameByDefault`` alone keeps ``-SHARED`` off the product name."""

    replicas: Mapping[str, int] = field(default_factory=dict)
    rename_by_default: bool = False


def sanitise(text: str) -> str:
    """GFD's: every character but letters, digits, ``-``, ``_``, ``.`` and spaces dropped, runs of
    spaces made one ``-``."""
    return "-".join(_NOT_SANITISED.sub("", text).split())


def node_labels(view: NodeView, mig_strategy: str, sharing: Sharing) -> Labels:
    """Every label of the node, by name."""
    if mig_strategy not in MIG_STRATEGIES:
        raise LabelError(f"unknown MIG strategy {mig_strategy!r} (one of {', '.join(MIG_STRATEGIES)})")
    labels: Labels = {f"{DOMAIN}/gpu.machine": sanitise(view.machine or "unknown")}
    labels |= version_labels(view.driver_version, view.cuda_version)
    labels[f"{DOMAIN}/mig.capable"] = _flag(any(gpu.mig_capable for gpu in view.gpus))
    labels[f"{DOMAIN}/mps.capable"] = "false"
    labels |= full_gpu_labels(view.gpus, sharing)
    if mig_strategy != "none":
        labels[f"{DOMAIN}/mig.strategy"] = mig_strategy
        labels |= (single_labels if mig_strategy == "single" else mixed_labels)(view.gpus, sharing)
    labels[f"{DOMAIN}/gpu.mode"] = gpu_mode(view.pci_classes.get(gpu.bus_id) for gpu in view.gpus)
    labels |= vgpu_labels(view)
    labels[f"{DOMAIN}/gpu.present"] = "true"
    return labels


def version_labels(driver: str, cuda: int) -> Labels:
    parts = driver.split(".")
    if not 2 <= len(parts) <= 3:
        raise LabelError(f"NVML's driver version {driver!r} is not X.Y[.Z]")
    major, minor, revision = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
    labels = {
        f"{DOMAIN}/cuda.driver.major": major,
        f"{DOMAIN}/cuda.driver.minor": minor,
        f"{DOMAIN}/cuda.driver.rev": revision,
        f"{DOMAIN}/cuda.driver-version.major": major,
        f"{DOMAIN}/cuda.driver-version.minor": minor,
        f"{DOMAIN}/cuda.driver-version.revision": revision,
        f"{DOMAIN}/cuda.driver-version.full": driver,
    }
    if cuda:  # NVML without a CUDA version (GFD would fail): the runtime labels are left out
        cuda_major, cuda_minor = str(cuda // 1000), str(cuda % 1000 // 10)
        labels |= {
            f"{DOMAIN}/cuda.runtime.major": cuda_major,
            f"{DOMAIN}/cuda.runtime.minor": cuda_minor,
            f"{DOMAIN}/cuda.runtime-version.major": cuda_major,
            f"{DOMAIN}/cuda.runtime-version.minor": cuda_minor,
            f"{DOMAIN}/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        }
    return labels


def family(major: int, minor: int) -> str:
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return _FAMILIES.get(major, "undefined")


def full_gpu_labels(gpus: Sequence[Gpu], sharing: Sharing) -> Labels:
    """``nvidia.com/gpu.*`` for the whole GPUs: one set per model, counting its GPUs in MIG mode too,
    which are described without sharing (replicas 0) unless a GPU of the model is not in MIG mode."""
    counts: dict[str, int] = {}
    groups: dict[tuple[bool, str], Gpu] = {}
    for gpu in gpus:
        counts[gpu.name] = counts.get(gpu.name, 0) + 1
        groups.setdefault((not gpu.mig_enabled, gpu.name), gpu)
    labels: Labels = {}
    # Later sets win: MIG mode's first, then the others; within each the lowest-numbered GPU's last.
    for (whole, name), gpu in sorted(groups.items(), key=lambda item: (item[0][0], -item[1].index)):
        rule = _Resource(FULL_GPU, sharing if whole else None)
        labels |= rule.base(counts[name], gpu.name)
        if gpu.memory_mib:
            labels[rule.key("memory")] = str(gpu.memory_mib)
        major, minor = gpu.compute_capability
        if major:
            labels[rule.key("family")] = family(major, minor)
            labels[rule.key("compute.major")] = str(major)
            labels[rule.key("compute.minor")] = str(minor)
    return labels


def single_labels(gpus: Sequence[Gpu], sharing: Sharing) -> Labels:
    """MIG strategy single: the MIG devices as ``nvidia.com/gpu`` when every GPU is in MIG mode with MIG
    devices of one profile; ``<model>-MIG-INVALID`` and zeros when not; nothing without MIG mode."""
    in_mig = [gpu for gpu in gpus if gpu.mig_enabled]
    if not in_mig:
        return {}
    profiles = _by_profile(in_mig)
    if len(in_mig) != len(gpus) or any(not gpu.migs for gpu in in_mig) or len(profiles) != 1:
        rule = _Resource(FULL_GPU, None)
        return {
            rule.key("product"): rule.product(in_mig[0].name, "MIG", "INVALID"),
            rule.key("count"): "0",
            rule.key("replicas"): "0",
            rule.key("sharing-strategy"): "",
            rule.key("memory"): "0",
        }
    ((profile, found),) = profiles.items()
    return _mig_labels(FULL_GPU, profile, found, sharing)


def mixed_labels(gpus: Sequence[Gpu], sharing: Sharing) -> Labels:
    """MIG strategy mixed: a set per MIG profile, as ``nvidia.com/mig-<profile>``."""
    labels: Labels = {}
    for profile, found in _by_profile(gpu for gpu in gpus if gpu.mig_enabled).items():
        labels |= _mig_labels(f"{DOMAIN}/mig-{profile}", profile, found, sharing)
    return labels


def gpu_mode(classes: Iterable[int | None]) -> str:
    """``compute`` (3D controllers), ``graphics`` (VGA), or ``unknown`` (unreadable, other, or mixed)."""
    found = set(classes)
    if len(found) != 1:
        return "unknown"
    return {COMPUTE_CLASS: "compute", VGA_CLASS: "graphics"}.get(found.pop() or 0, "unknown")


def vgpu_labels(view: NodeView) -> Labels:
    """``vgpu.present`` and, on a vGPU, what its host runs; none when the PCI functions' configuration
    spaces could not be read (as GFD, which logs it)."""
    if view.vgpus is None:
        return {}
    labels = {f"{DOMAIN}/vgpu.present": _flag(bool(view.vgpus))}
    for host in view.vgpus:
        labels[f"{DOMAIN}/vgpu.host-driver-version"] = host.driver_version
        labels[f"{DOMAIN}/vgpu.host-driver-branch"] = host.driver_branch
    return labels


def _by_profile(gpus: Iterable[Gpu]) -> dict[str, list[tuple[Gpu, MigDevice]]]:
    """The MIG devices by profile as resource names spell it (``1g.10gb+me`` as ``1g.10gb.me``)."""
    found: dict[str, list[tuple[Gpu, MigDevice]]] = {}
    for gpu in gpus:
        for mig in gpu.migs:
            found.setdefault(mig.profile.replace("+", "."), []).append((gpu, mig))
    return found


def _mig_labels(resource: str, profile: str, found: list[tuple[Gpu, MigDevice]], sharing: Sharing) -> Labels:
    """A MIG resource's labels: its count and what its first device is."""
    parent, mig = found[0]
    rule = _Resource(resource, sharing)
    labels = rule.base(len(found), parent.name, "MIG", profile)
    for suffix, value in (
        ("memory", mig.memory_mb),
        ("multiprocessors", mig.multiprocessors),
        ("slices.gi", mig.gi_slices),
        ("slices.ci", mig.ci_slices),
        ("engines.copy", mig.copy_engines),
        ("engines.decoder", mig.decoders),
        ("engines.encoder", mig.encoders),
        ("engines.jpeg", mig.jpeg_decoders),
        ("engines.ofa", mig.ofas),
    ):
        labels[rule.key(suffix)] = str(value)
    return labels


@dataclass(frozen=True, slots=True)
class _Resource:
    """One resource's labels, ``<resource>.<suffix>``; ``sharing`` None: described without sharing."""

    name: str
    sharing: Sharing | None

    def key(self, suffix: str) -> str:
        return f"{self.name}.{suffix}"

    @property
    def replicas(self) -> int:
        if self.sharing is None:
            return 0
        return self.sharing.replicas.get(self.name, 1)

    def product(self, *parts: str) -> str:
        words = [sanitise(part) for part in parts if part]
        if self.replicas > 1 and self.sharing is not None and not self.sharing.rename_by_default:
            words.append("SHARED")
        return "-".join(words)

    def base(self, count: int, *parts: str) -> Labels:
        return {
            self.key("product"): self.product(*parts),
            self.key("count"): str(count),
            self.key("replicas"): str(self.replicas),
            self.key("sharing-strategy"): "time-slicing" if self.replicas > 1 else "none",
        }


def _flag(value: bool) -> str:
    return "true" if value else "false"
