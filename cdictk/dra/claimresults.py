"""What the scheduler allocated to this node's driver in a ResourceClaim, checked before anything is
prepared.

The claim is the API server's JSON (``resource.k8s.io/v1``; ``v1beta2`` and ``v1beta1`` claims carry
their results in the same shape). Its ``status.allocation.devices.results`` may name several drivers:
only this driver's are ours, the others' are left to their drivers. Each of ours must be in this node's
pool and name a device this node has: a result for another pool is refused, never prepared here, since
its device is another node's. A request ``main/sub`` (a subrequest of ``firstAvailable``) is answered
as ``main``, the name a container's ``resources.claims[].request`` uses.

Refused in one line (:class:`ClaimError`): a claim that is not allocated, one whose UID is not the one
the kubelet asked for (it was deleted and made again under the same name: the one the kubelet means is
gone), a result of ours for another pool, a device this node does not have, and a result that is not
the API's shape.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from cdictk.startpath.helpers.errors import CdictkError


class ClaimError(CdictkError):
    """A claim this node cannot prepare: one line naming the claim and why."""

    def __init__(self, claim: str, reason: str) -> None:
        super().__init__("", f"claim {claim}", reason)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of this driver: the request (without its ``/sub``), the pool, the device,
    whether it is admin access, and its share ID (a device allocated to several claims at once)."""

    request: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None


def allocated_devices(
    claim: Mapping[str, Any],
    *,
    uid: str,
    driver: str,
    pool: str,
    devices: Collection[str],
    namespace: str = "",
    name: str = "",
) -> tuple[AllocatedDevice, ...]:
    """This driver's results in ``claim`` for ``pool``, in the claim's order; ClaimError when the claim
    cannot be prepared here. ``uid``, ``namespace`` and ``name`` are what the kubelet asked for (the
    names only say which claim in errors); ``devices`` the names of the node's devices."""
    label = f"{namespace}/{name}" if namespace or name else uid
    if not isinstance(claim, Mapping):
        raise ClaimError(label, "not a ResourceClaim object")
    metadata = _mapping(claim.get("metadata"), label, "metadata")
    found_uid = metadata.get("uid")
    if found_uid != uid:
        raise ClaimError(label, f"got replaced: its UID is {found_uid!r}, not {uid!r} as the kubelet asked")
    status = _mapping(claim.get("status"), label, "status")
    allocation = status.get("allocation")
    if allocation is None:
        raise ClaimError(label, "not allocated")
    allocation = _mapping(allocation, label, "status.allocation")
    results = _mapping(allocation.get("devices"), label, "status.allocation.devices").get("results")
    if results is None:
        results = []  # nothing allocated of any driver: the API server leaves the list out
    if not isinstance(results, list):
        raise ClaimError(label, "status.allocation.devices.results is not a list")
    ours = []
    for i, item in enumerate(results):
        where = f"status.allocation.devices.results[{i}]"
        result = _mapping(item, label, where)
        if _string(result, "driver", label, where) != driver:
            continue  # another driver's device: its own plugin prepares it
        request = _string(result, "request", label, where).split("/", 1)[0]
        result_pool = _string(result, "pool", label, where)
        device = _string(result, "device", label, where)
        if result_pool != pool:
            raise ClaimError(
                label,
                f"device {device} of request {request} is allocated to another node's pool {result_pool}",
            )
        if device not in devices:
            raise ClaimError(label, f"device {device} of request {request} is not a device of this node")
        admin = result.get("adminAccess")
        share = result.get("shareID")
        if not isinstance(admin, bool | None) or not isinstance(share, str | None):
            raise ClaimError(label, f"{where}: adminAccess is not a boolean or shareID not a string")
        ours.append(AllocatedDevice(request, result_pool, device, bool(admin), share or None))
    return tuple(ours)


def _mapping(value: object, label: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(label, f"{where} is not an object")
    return value


def _string(result: Mapping[str, Any], key: str, label: str, where: str) -> str:
    value = result.get(key)
    if not isinstance(value, str) or not value:
        raise ClaimError(label, f"{where}.{key} is missing or not a string")
    return value
