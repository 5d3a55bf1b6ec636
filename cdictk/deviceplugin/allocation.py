"""What ``Allocate`` answers for a container: the devices' CDI names, as the runtime is to get them.

- ``cdi-cri``: the names in ``cdi_devices``, which the kubelet (1.28 and later) passes to the runtime
  in the CRI's ``CDI_devices`` (containerd 1.7.2+, CRI-O 1.28+);
- ``cdi-annotations``: the names in one ``cdi.k8s.io/cdictk-device-plugin_<response uuid>``
  annotation, which containerd (1.7+, CDI on) and CRI-O read, and which a RuntimeClass with
  ``cdictk-runtime`` reads for runtimes without CDI. The key is new for every response: the kubelet
  keeps only one of two equal keys from two resources of one container;
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and a mount of
  ``/dev/null`` at ``/var/run/nvidia-container-devices/<uuid>`` per device, which only the kubelet can
  make: ``cdictk-runtime`` (``accept-volume-mounts = true``) and NVIDIA's runtime read them.

Never ``NVIDIA_VISIBLE_DEVICES=<ids>`` (NVIDIA's ``envvar``, its default): a runtime that honours that
variable also honours it when an image sets it, so a pod that asked for no GPU gets them all.

The names are the node spec's (``cdictk cdi generate`` names every GPU and MIG device by UUID); with
spec dirs set, every name must resolve there, or Allocate fails with one line that says which, which
the kubelet reports on the pod (``UnexpectedAdmissionError``) instead of a container that cannot start.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from cdictk.api import CdictkError, annotations_for
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.proto.deviceplugin_pb2 import CDIDevice, ContainerAllocateResponse, Mount
from cdictk.deviceplugin.resources import REPLICA_SEPARATOR, Resource, underlying

ANNOTATION_PLUGIN = "cdictk-device-plugin"
DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


class AllocationError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "allocate", reason)


def allocate(
    resource: Resource,
    device_ids: Sequence[str],
    settings: Settings,
    unresolved: Callable[[list[str]], list[str]] | None = None,
    response_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> ContainerAllocateResponse:
    """The answer for one container asking for ``device_ids`` of ``resource``. ``unresolved``: the
    names among those given that no CDI spec defines (None: not checked)."""
    if not device_ids:
        raise AllocationError(f"no devices of {resource.name} asked for")
    unknown = [device_id for device_id in device_ids if resource.device(device_id) is None]
    if unknown:
        raise AllocationError(f"{resource.name} has no device {', '.join(unknown)}")
    if (
        resource.replicas > 1
        and settings.fail_requests_greater_than_one
        and len(device_ids) > 1
        and any(REPLICA_SEPARATOR in device_id for device_id in device_ids)
    ):
        raise AllocationError(
            f"{resource.name} is shared (failRequestsGreaterThanOne): at most 1 per container, "
            f"not {len(device_ids)}"
        )
    uuids = underlying(device_ids)
    names = [f"{settings.cdi_kind}={device}" for device in uuids]
    if unresolved is not None:
        missing = unresolved(names)
        if missing:
            raise AllocationError(
                f"no CDI spec defines {', '.join(missing)} (is the node's spec written? cdictk cdi generate)"
            )
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi_devices: list[CDIDevice] = []
    strategies = settings.list_strategies
    if "cdi-cri" in strategies:
        cdi_devices = [CDIDevice(name=name) for name in names]
    if "cdi-annotations" in strategies:
        written = annotations_for(ANNOTATION_PLUGIN, response_id(), names)
        annotations = {
            settings.cdi_annotation_prefix + key.removeprefix("cdi.k8s.io/"): value
            for key, value in written.items()
        }
    if "volume-mounts" in strategies:
        envs[VISIBLE_DEVICES] = DEVICE_LIST_DIR
        mounts = [
            Mount(container_path=f"{DEVICE_LIST_DIR}/{device}", host_path="/dev/null", read_only=True)
            for device in uuids
        ]
    return ContainerAllocateResponse(
        envs=envs, mounts=mounts, annotations=annotations, cdi_devices=cdi_devices
    )
