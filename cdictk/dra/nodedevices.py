"""The node's devices as the DRA plugin publishes them: NVIDIA's names, attributes and capacities.

From what discovery found (:class:`cdictk.node.facts.NodeFacts`: NVML's answer through the one NVML
runner, the node's sysfs), named and described as NVIDIA's ``gpu-kubelet-plugin`` does, so that the
DeviceClasses and CEL selectors written for it select the same devices here:

- a GPU not in MIG mode is ``gpu-<minor>`` (the minor number, not NVML's index); a GPU in MIG mode is no
  device itself, each of its MIG devices is one:
  ``gpu-<parent minor>-mig-<profile>-<GPU instance profile ID>-<placement start>``, the profile lower
  case without its dots (``gpu-0-mig-1g10gb-19-4``);
- attributes, in the driver's domain unless qualified: ``type`` (``gpu``, ``mig``), ``uuid``,
  ``parentUUID`` and ``profile`` for a MIG device, then the (parent) GPU's ``productName``, ``brand``
  and ``architecture`` as NVIDIA's go-nvlib spells them (``Nvidia``, ``Hopper``), the versions
  ``cudaComputeCapability``, ``driverVersion`` and ``cudaDriverVersion`` (semver: ``9.0.0``,
  ``580.95.5``, ``13.0.0``), and the standard ``resource.kubernetes.io/pciBusID``, ``pcieRoot`` and
  ``numaNode`` where sysfs gives them;
- capacities: ``memory`` in bytes (NVML's total for a GPU, the GPU instance profile's for a MIG
  device), and for a MIG device its profile's ``multiprocessors``, ``copyEngines``, ``decoders``,
  ``encoders``, ``jpegEngines``, ``ofaEngines`` and a ``memorySlice<i>`` of 1 per memory slice it
  occupies.

A fact NVML did not give leaves its attribute out, with a warning. Left out with a warning too: a MIG
device whose GPU instance NVML would not describe (it could not be named), one whose compute instance is
smaller than its GPU instance (NVIDIA's driver has no name for it: two would share one), and a GPU whose
device node is missing (discovery said so already; its spec has no device to prepare).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cdictk.node.facts import NodeFacts
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.node.pcidevices import numa_node, pcie_root
from cdictk.startpath.helpers.roots import Roots

GPU = "gpu"
MIG = "mig"
STANDARD = "resource.kubernetes.io"  # the attributes Kubernetes defines, qualified by its domain
PCI_BUS_ID = f"{STANDARD}/pciBusID"
PCIE_ROOT = f"{STANDARD}/pcieRoot"
NUMA_NODE = f"{STANDARD}/numaNode"

# nvmlBrandType_t (nvml.h) -> go-nvlib's name, which NVIDIA's driver publishes (cdictk.node.nvmllib's
# BRANDS are libnvidia-container's, in lower case: another name for the same number).
BRAND_NAMES = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}
# nvmlDeviceArchitecture_t (NVML_DEVICE_ARCH_*) -> go-nvlib's name.
ARCHITECTURE_NAMES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
    0xFFFFFFFF: "Unknown",
}

_VERSION = re.compile(r"\d+(?:\.\d+){0,2}")
_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")  # the standard attribute's form
_NOT_IN_NAME = re.compile(r"[^a-z0-9-]")


@dataclass(frozen=True, slots=True)
class Version:
    """A version attribute's value (semver 2.0.0), told apart from a string attribute's."""

    text: str


AttributeValue = str | int | bool | Version


@dataclass(frozen=True, slots=True)
class Taint:
    """A device taint (:mod:`cdictk.dra.devicetaints` makes them from health): ``effect`` None,
    NoSchedule or NoExecute; ``time_added`` RFC 3339, when it first appeared."""

    key: str
    effect: str
    value: str = ""
    time_added: str = ""


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of the node's pool: its name, ``gpu`` or ``mig``, attributes by name (unqualified:
    the driver's domain) and capacities by name (integers: bytes for ``memory``, counts otherwise);
    taints where health put some (discovery gives none)."""

    name: str
    type: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, int]
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeDevices:
    devices: tuple[DraDevice, ...]  # sorted by name
    warnings: tuple[str, ...]  # one line per fact or device left out


def semver(text: str) -> str | None:
    """``580.126.20`` as it is, ``535.54`` as ``535.54.0``, ``580.95.05`` as ``580.95.5`` (semver has no
    leading zeros; NVIDIA's driver reads versions as leniently); None for anything else."""
    if not _VERSION.fullmatch(text):
        return None
    parts = [str(int(part)) for part in text.split(".")]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def mig_device_name(parent_minor: int, profile: str, profile_id: int, placement_start: int) -> str:
    """NVIDIA's name of a MIG device: the profile lower case, dots dropped, anything else a DNS label
    cannot hold made ``-`` (``1g.10gb+me`` is ``1g10gb-me``)."""
    cleaned = _NOT_IN_NAME.sub("-", profile.lower().replace(".", "")).strip("-")
    return f"gpu-{parent_minor}-mig-{cleaned}-{profile_id}-{placement_start}"


def node_devices(facts: NodeFacts) -> NodeDevices:
    """The devices of the node discovery found, as the plugin publishes them."""
    warnings: list[str] = []
    common = _driver_attributes(facts, warnings)
    devices: list[DraDevice] = []
    for gpu in facts.gpus:
        if gpu.minor not in facts.gpu_nodes:
            continue  # discovery warned: no /dev/nvidia<minor>, so nothing to prepare
        shared = {**common, **_gpu_attributes(gpu, facts.roots, warnings)}
        if not gpu.mig_enabled:
            capacity = {"memory": gpu.memory_bytes} if gpu.memory_bytes else {}
            if not capacity:
                warnings.append(f"GPU {gpu.index} ({gpu.uuid}): NVML gave no memory size; no memory capacity")
            attributes = {"type": GPU, "uuid": gpu.uuid, **shared}
            devices.append(DraDevice(f"gpu-{gpu.minor}", GPU, attributes, capacity))
            continue
        for mig in gpu.migs:
            device = _mig_device(gpu, mig, shared, warnings)
            if device is not None:
                devices.append(device)
    return NodeDevices(tuple(sorted(devices, key=lambda device: device.name)), tuple(warnings))


def _driver_attributes(facts: NodeFacts, warnings: list[str]) -> dict[str, AttributeValue]:
    found: dict[str, AttributeValue] = {}
    driver = semver(facts.driver_version)
    if driver is not None:
        found["driverVersion"] = Version(driver)
    else:
        warnings.append(f"driver version {facts.driver_version!r} is no version: no driverVersion attribute")
    if facts.cuda_version > 0:
        # nvml.h's CUDA_VERSION_MAJOR and _MINOR: 13000 is 13.0, 12040 is 12.4.
        found["cudaDriverVersion"] = Version(
            f"{facts.cuda_version // 1000}.{facts.cuda_version % 1000 // 10}.0"
        )
    else:
        warnings.append("NVML gave no CUDA driver version: no cudaDriverVersion attribute")
    return found


def _gpu_attributes(gpu: Gpu, roots: Roots, warnings: list[str]) -> dict[str, AttributeValue]:
    """What a GPU and its MIG devices share: the model, its versions, where it sits."""
    found: dict[str, AttributeValue] = {"productName": gpu.name}
    lacking = []
    brand = BRAND_NAMES.get(gpu.brand) if gpu.brand is not None else None
    if brand is not None:
        found["brand"] = brand
    else:
        lacking.append("brand")
    architecture = ARCHITECTURE_NAMES.get(gpu.architecture) if gpu.architecture is not None else None
    if architecture is not None:
        found["architecture"] = architecture
    else:
        lacking.append("architecture")
    major, minor = gpu.compute_capability
    if major:
        found["cudaComputeCapability"] = Version(f"{major}.{minor}.0")
    else:
        lacking.append("cudaComputeCapability")
    if lacking:
        warnings.append(f"GPU {gpu.index} ({gpu.uuid}): NVML gave no {', '.join(lacking)}; left out")
    if _BUS_ID.fullmatch(gpu.bus_id):
        found[PCI_BUS_ID] = gpu.bus_id
        root = pcie_root(roots, gpu.bus_id)
        if root is not None:
            found[PCIE_ROOT] = root
        numa = numa_node(roots, gpu.bus_id)
        if numa is not None:
            found[NUMA_NODE] = numa
    return found


def _mig_device(
    gpu: Gpu, mig: MigDevice, shared: Mapping[str, AttributeValue], warnings: list[str]
) -> DraDevice | None:
    what = f"MIG device {gpu.index}:{mig.index} ({mig.uuid})"
    if not mig.whole_instance:
        warnings.append(
            f"{what}: its compute instance ({mig.profile}) is smaller than its GPU instance, which DRA "
            "names as one device; not published"
        )
        return None
    instance = mig.instance
    if instance is None:
        warnings.append(f"{what}: NVML would not describe its GPU instance; not published")
        return None
    attributes: dict[str, AttributeValue] = {
        "type": MIG,
        "uuid": mig.uuid,
        "parentUUID": gpu.uuid,
        "profile": mig.profile,
        **shared,
    }
    capacity = {
        "memory": instance.memory_mb << 20,
        "multiprocessors": instance.multiprocessors,
        "copyEngines": instance.copy_engines,
        "decoders": instance.decoders,
        "encoders": instance.encoders,
        "jpegEngines": instance.jpeg_decoders,
        "ofaEngines": instance.ofas,
    }
    start = instance.placement_start
    capacity |= {f"memorySlice{i}": 1 for i in range(start, start + instance.placement_size)}
    name = mig_device_name(gpu.minor, mig.profile, instance.profile_id, start)
    return DraDevice(name, MIG, attributes, capacity)
