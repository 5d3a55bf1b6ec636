"""The node's GPUs and MIG devices as extended resources, by MIG strategy and replicas.

- ``none``: every GPU as ``nvidia.com/gpu``. A GPU in MIG mode is left out, with a warning: the node's
  CDI spec has no device for it (its memory belongs to its MIG devices), where NVIDIA's plugin hands
  it out whole.
- ``single``: the MIG devices as ``nvidia.com/gpu``; every GPU must be in MIG mode with MIG devices of
  one profile, or none in MIG mode (then as ``none``).
- ``mixed``: GPUs not in MIG mode as ``nvidia.com/gpu``, MIG devices as ``nvidia.com/mig-<profile>``
  (``1g.10gb``, ``+`` written ``.``: ``mig-1g.10gb.me``). Only MIG devices whose compute instance spans
  their GPU instance: NVIDIA's plugin makes resources for those profiles alone (``1c.2g.20gb`` has
  none, and there its plugin fails to start); here such a device is left out with a warning.

Device IDs are GPU and MIG UUIDs, stable across restarts and MIG changes of other GPUs (the kubelet
checkpoints allocations by ID). Replicas (time-slicing) offer each device N times as ``<uuid>::<n>``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.node.pcidevices import numa_node
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots

REPLICA_SEPARATOR = "::"
RESOURCE_DOMAIN = "nvidia.com"  # NVIDIA's plugin's: what pods and schedulers ask for


class ResourceError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "mig strategy", reason)


@dataclass(frozen=True, slots=True)
class PluginDevice:
    id: str  # what the kubelet sees: the UUID, or <uuid>::<n> for a replica
    uuid: str  # the GPU or MIG device's UUID, its name in the node's CDI spec
    gpu_index: int
    gpu_uuid: str  # its own for a GPU, its parent's for a MIG device
    gi: int | None = None
    ci: int | None = None
    numa: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.gi is not None


@dataclass(frozen=True, slots=True)
class Resource:
    name: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared
    devices: tuple[PluginDevice, ...]
    replicas: int = 1

    @property
    def socket(self) -> str:
        """The plugin's socket file in the kubelet's device plugin directory: the whole resource name,
        ``/`` written ``_`` (``cdictk-nvidia.com_gpu.sock``). A domain has no ``_``, so two resources
        never share a socket, not even two of one name (``example.com/gpu`` beside ``nvidia.com/gpu``)."""
        domain, name = self.name.split("/", 1)
        return f"cdictk-{domain}_{name}.sock"

    def device(self, device_id: str) -> PluginDevice | None:
        for device in self.devices:
            if device.id == device_id:
                return device
        return None


def numa_reader(sys_root: str) -> Callable[[str], int | None]:
    """The NUMA node of a PCI device from ``<sys>/bus/pci/devices/<bus>/numa_node`` (None: -1 or none)."""

    roots = Roots(sys=sys_root)

    def numa(bus_id: str) -> int | None:
        return numa_node(roots, bus_id)

    return numa


def build(
    gpus: Sequence[Gpu], settings: Settings, numa: Callable[[str], int | None], warn: Callable[[str], None]
) -> list[Resource]:
    """The resources to advertise, sorted by name; ResourceError when the strategy cannot be met."""
    prefix = RESOURCE_DOMAIN
    whole = [_gpu_device(gpu, numa) for gpu in gpus if not gpu.mig_enabled]
    mig_gpus = [gpu for gpu in gpus if gpu.mig_enabled]
    found: dict[str, list[PluginDevice]] = {}
    strategy = settings.mig_strategy
    if strategy == "none":
        for gpu in mig_gpus:
            warn(
                f"GPU {gpu.index} ({gpu.uuid}) is in MIG mode and left out: with --mig-strategy none only "
                "whole GPUs are offered (use single or mixed for its MIG devices)"
            )
        found[f"{prefix}/gpu"] = whole
    elif strategy == "single":
        if mig_gpus and whole:
            raise ResourceError(
                "single needs every GPU in MIG mode or none: GPUs "
                + ", ".join(str(g.index) for g in gpus if not g.mig_enabled)
                + " are not (use mixed)"
            )
        profiles = {mig.profile for gpu in mig_gpus for mig in gpu.migs}
        empty = [str(gpu.index) for gpu in mig_gpus if not gpu.migs]
        if empty:
            raise ResourceError(f"single: GPUs {', '.join(empty)} are in MIG mode without MIG devices")
        if len(profiles) > 1:
            raise ResourceError(
                f"single needs one MIG profile on the node, not {', '.join(sorted(profiles))}"
            )
        found[f"{prefix}/gpu"] = whole + [_mig_device(gpu, mig, numa) for gpu in mig_gpus for mig in gpu.migs]
    else:
        found[f"{prefix}/gpu"] = whole
        for gpu in mig_gpus:
            if not gpu.migs:
                warn(f"GPU {gpu.index} ({gpu.uuid}) is in MIG mode without MIG devices: nothing to offer")
            for mig in gpu.migs:
                if not mig.whole_instance:
                    warn(
                        f"MIG device {gpu.index}:{mig.index} ({mig.uuid}, {mig.profile}) is left out: with "
                        "--mig-strategy mixed only MIG devices whose compute instance is their whole GPU "
                        "instance are offered"
                    )
                    continue
                name = f"{prefix}/mig-{mig.profile.replace('+', '.')}"
                found.setdefault(name, []).append(_mig_device(gpu, mig, numa))
    resources = [Resource(name, tuple(devices)) for name, devices in found.items() if devices]
    return sorted(_with_replicas(resources, settings), key=lambda resource: resource.name)


def _gpu_device(gpu: Gpu, numa: Callable[[str], int | None]) -> PluginDevice:
    return PluginDevice(gpu.uuid, gpu.uuid, gpu.index, gpu.uuid, numa=numa(gpu.bus_id))


def _mig_device(gpu: Gpu, mig: MigDevice, numa: Callable[[str], int | None]) -> PluginDevice:
    return PluginDevice(mig.uuid, mig.uuid, gpu.index, gpu.uuid, mig.gi, mig.ci, numa(gpu.bus_id))


def _with_replicas(resources: list[Resource], settings: Settings) -> list[Resource]:
    by_name = {resource.name: resource for resource in resources}
    for rule in settings.replicas:
        resource = by_name.get(rule.name)
        if resource is None:
            continue
        name = settings.shared_name(rule)
        if name != rule.name and name in by_name:
            raise ResourceError(f"replicas of {rule.name} renamed {name}, which the node offers already")
        devices = tuple(
            PluginDevice(
                f"{device.uuid}{REPLICA_SEPARATOR}{n}",
                device.uuid,
                device.gpu_index,
                device.gpu_uuid,
                device.gi,
                device.ci,
                device.numa,
            )
            for device in resource.devices
            for n in range(rule.replicas)
        )
        del by_name[rule.name]
        by_name[name] = Resource(name, devices, rule.replicas)
    return list(by_name.values())


def keep_missing(
    previous: Sequence[Resource], current: Sequence[Resource], found: set[str]
) -> tuple[list[Resource], set[str]]:
    """``current`` with the devices of ``previous`` whose GPU discovery did not find (not in ``found``:
    lost, fallen off the bus) put back, and those GPUs' UUIDs. Dropped from the kubelet's list, a device
    a pod holds would leave the node's capacity; kept, it is reported unhealthy until NVML answers for
    it (NVIDIA's plugin never rediscovers: its list is fixed at start)."""
    by_name = {resource.name: resource for resource in current}
    missing: set[str] = set()
    for old in previous:
        kept = tuple(device for device in old.devices if device.gpu_uuid not in found)
        if not kept:
            continue
        missing.update(device.gpu_uuid for device in kept)
        now = by_name.get(old.name)
        devices = (now.devices if now is not None else ()) + kept
        by_name[old.name] = Resource(
            old.name, tuple(sorted(devices, key=lambda device: device.gpu_index)), old.replicas
        )
    return sorted(by_name.values(), key=lambda resource: resource.name), missing


def underlying(device_ids: Sequence[str]) -> list[str]:
    """The UUIDs behind device IDs, replicas' ``::<n>`` taken off, each once, in order."""
    return list(dict.fromkeys(device_id.split(REPLICA_SEPARATOR, 1)[0] for device_id in device_ids))
