"""The node's devices as ResourceSlice objects (plain JSON-able dicts), and whether published ones differ.

One pool per node, named by the node, as NVIDIA's driver publishes it: the devices sorted by name and
cut into slices of at most :data:`MAX_DEVICES` (the API's limit; :data:`MAX_TAINTED_DEVICES` when a
device has taints, which health gives it: :mod:`cdictk.dra.devicetaints`), each slice carrying the pool's
generation and how many slices it has, the node's name, and the Node as its owner when its UID is
known (the slices go with the Node). A node without devices still gets one empty slice: the driver is
up and has nothing. Names are left to the API server: ``generateName`` is the slice's index in hex
(at least five digits), the driver and the node (``00000-gpu.nvidia.com-node1-``), which is how the
index is told again from a published slice's name.

``resource.k8s.io/v1`` puts a device's attributes and capacities beside its name; ``v1beta1`` (what
Kubernetes 1.32 and 1.33 serve) wraps them in ``basic``. Limits the API server would refuse a whole
slice for are checked here first, one line naming the device: a string or version longer than 64
characters, more than 32 attributes and capacities on a device, more than 16 taints, a name that is no
DNS label.

:func:`slices_differ` is what a publisher asks before writing: do the slices the API server holds for
this driver and node say what the wanted ones say.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cdictk.dra.nodedevices import DraDevice, Taint, Version
from cdictk.startpath.helpers.errors import CdictkError

DRIVER = "gpu.nvidia.com"
GROUP = "resource.k8s.io"
V1 = f"{GROUP}/v1"
V1BETA1 = f"{GROUP}/v1beta1"
API_VERSIONS = (V1, V1BETA1)
MAX_DEVICES = 128  # per slice
MAX_TAINTED_DEVICES = 64  # per slice where a device has taints (or counters or list attributes: none here)
MAX_TAINTS = 16  # of one device
MAX_ENTRIES = 32  # attributes and capacities of one device together
MAX_VALUE_LENGTH = 64  # of a string or version attribute
MAX_ID_LENGTH = 32  # an attribute's or capacity's name, past its domain
INDEX_DIGITS = 5  # the least hex digits of a slice's index in its name

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_FACTORS = {
    **{suffix: 1024**power for power, suffix in enumerate(_BINARY)},
    **{suffix: 1000**power for power, suffix in enumerate(("", "k", "M", "G", "T", "P", "E")) if suffix},
}


class SliceError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "", reason)


def quantity(value: int) -> str:
    """A non-negative integer as Kubernetes writes it back (a BinarySI quantity, canonical): plain
    below 1024, else with the largest binary suffix that keeps it whole (``85520809984`` is
    ``81559Mi``, ``1536`` stays ``1536``)."""
    if value < 0:
        raise SliceError(f"capacity {value} is negative")
    power = 0
    while value >= 1024 and value % 1024 == 0 and power < len(_BINARY) - 1:
        value //= 1024
        power += 1
    return f"{value}{_BINARY[power]}"


def resource_slices(
    devices: Sequence[DraDevice],
    node_name: str,
    *,
    driver: str = DRIVER,
    api_version: str = V1,
    generation: int = 1,
    node_uid: str | None = None,
) -> list[dict[str, Any]]:
    """The pool of ``node_name`` with ``devices``, as ResourceSlices of ``api_version``; SliceError
    for a device the API server would refuse, a bad driver or node name, or an unknown API version."""
    if api_version not in API_VERSIONS:
        raise SliceError(f"unknown API version {api_version!r} (one of {', '.join(API_VERSIONS)})")
    if len(driver) > 63 or not _DNS_SUBDOMAIN.fullmatch(driver):
        raise SliceError(f"driver name {driver!r} is no DNS subdomain of at most 63 characters")
    if len(node_name) > 253 or not _DNS_SUBDOMAIN.fullmatch(node_name):
        raise SliceError(f"node name {node_name!r} is no DNS subdomain")
    if generation < 1:
        raise SliceError(f"generation {generation} is below 1")
    ordered = sorted(devices, key=lambda device: device.name)
    names = [device.name for device in ordered]
    for before, name in itertools.pairwise(names):
        if before == name:
            raise SliceError(f"device {name}: two devices of that name in one pool")
    wire = [_device(device, driver, api_version) for device in ordered]
    most = MAX_TAINTED_DEVICES if any(device.taints for device in ordered) else MAX_DEVICES
    chunks = [wire[at : at + most] for at in range(0, len(wire), most)] or [[]]
    width = index_width(len(chunks))
    slices = []
    for index, chunk in enumerate(chunks):
        metadata: dict[str, Any] = {"generateName": f"{index:0{width}x}-{driver}-{node_name}-"}
        if node_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
            ]
        spec: dict[str, Any] = {
            "driver": driver,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
            "nodeName": node_name,
        }
        if chunk:
            spec["devices"] = chunk
        slices.append(
            {"apiVersion": api_version, "kind": "ResourceSlice", "metadata": metadata, "spec": spec}
        )
    return slices


def index_width(count: int) -> int:
    """How many hex digits the index of each of ``count`` slices has in their names."""
    return max(INDEX_DIGITS, len(f"{max(count - 1, 0):x}"))


def slice_index(name: str, count: int) -> int | None:
    """The index a published slice's name starts with, for a pool of ``count`` slices; None when the
    name starts otherwise (a slice of another scheme, or of a pool of another size)."""
    prefix, dash, _ = name.partition("-")
    if not dash or len(prefix) != index_width(count) or not re.fullmatch(r"[0-9a-f]+", prefix):
        return None
    return int(prefix, 16)


def slices_differ(published: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``published`` (the slices the API server holds for this driver and node, as listed)
    differ from ``wanted`` (:func:`resource_slices`): another number of slices, more than one
    generation among them, a name that gives no index or one taken twice, or a slice whose driver,
    pool name, slice count, node or devices (in order; values compared as the API server keeps them,
    quantities by amount, ``basic`` unwrapped, taints by key, value and effect) are not those of the
    wanted slice of its index. The generation's number and the rest of the metadata are not compared:
    a publisher writes the wanted slices under a new generation when they differ. Nor is a taint's
    ``timeAdded``: the server fills it in where it is missing, and a restarted plugin's taint is the
    one published."""
    if len(published) != len(wanted):
        return True
    if len({_get(item, "spec", "pool", "generation") for item in published}) > 1:
        return True
    by_index: dict[int, Mapping[str, Any]] = {}
    for item in published:
        index = slice_index(str(_get(item, "metadata", "name") or ""), len(wanted))
        if index is None or index in by_index:
            return True
        by_index[index] = item
    for index, want in enumerate(wanted):
        have = by_index.get(index)
        if have is None or _compared(have) != _compared(want):
            return True
    return False


def _device(device: DraDevice, driver: str, api_version: str) -> dict[str, Any]:
    if not _DNS_LABEL.fullmatch(device.name):
        raise SliceError(f"device {device.name!r}: its name is no DNS label")
    if len(device.attributes) + len(device.capacity) > MAX_ENTRIES:
        raise SliceError(
            f"device {device.name}: {len(device.attributes)} attributes and {len(device.capacity)} "
            f"capacities, more than the {MAX_ENTRIES} a device may have"
        )
    attributes = {}
    for name, value in device.attributes.items():
        _check_name(device.name, name, driver)
        attributes[name] = _attribute(device.name, name, value)
    capacity = {}
    for name, amount in device.capacity.items():
        _check_name(device.name, name, driver)
        capacity[name] = {"value": quantity(amount)}
    body: dict[str, Any] = {"attributes": attributes}
    if capacity:
        body["capacity"] = capacity
    if len(device.taints) > MAX_TAINTS:
        raise SliceError(f"device {device.name}: {len(device.taints)} taints, more than {MAX_TAINTS}")
    if device.taints:
        body["taints"] = [_taint(taint) for taint in device.taints]
    return {"name": device.name, "basic": body} if api_version == V1BETA1 else {"name": device.name, **body}


def _taint(taint: Taint) -> dict[str, str]:
    wire = {"key": taint.key}
    if taint.value:
        wire["value"] = taint.value
    wire["effect"] = taint.effect
    if taint.time_added:
        wire["timeAdded"] = taint.time_added
    return wire


def _check_name(device: str, name: str, driver: str) -> None:
    """A qualified name: a C identifier of at most 32 characters, after an optional domain."""
    domain, slash, identifier = name.rpartition("/")
    if (
        (slash and (len(domain) > 63 or not _DNS_SUBDOMAIN.fullmatch(domain)))
        or len(identifier) > MAX_ID_LENGTH
        or not _C_IDENTIFIER.fullmatch(identifier)
    ):
        raise SliceError(f"device {device}: {name!r} is no attribute or capacity name (driver {driver})")


def _attribute(device: str, name: str, value: object) -> dict[str, Any]:
    if isinstance(value, bool):  # before int: a bool is one
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        kind, text = "version", value.text
    elif isinstance(value, str):
        kind, text = "string", value
    else:
        raise SliceError(f"device {device}: attribute {name} has a value of type {type(value).__name__}")
    if len(text) > MAX_VALUE_LENGTH:
        raise SliceError(
            f"device {device}: attribute {name} is {len(text)} characters long, more than {MAX_VALUE_LENGTH}"
        )
    return {kind: text}


def _get(item: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(item, Mapping):
            return None
        item = item.get(key)  # type: ignore[assignment]
    return item


def _compared(item: Mapping[str, Any]) -> tuple[Any, ...]:
    spec = item.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    pool = spec.get("pool")
    pool = pool if isinstance(pool, Mapping) else {}
    devices = spec.get("devices") or []
    return (
        spec.get("driver"),
        pool.get("name"),
        pool.get("resourceSliceCount"),
        spec.get("nodeName"),
        [_compared_device(device) for device in devices],
    )


def _compared_device(device: Any) -> Any:
    if not isinstance(device, Mapping):
        return device
    fields = dict(device)
    basic = fields.pop("basic", None)
    if isinstance(basic, Mapping):
        fields |= basic
    fields["attributes"] = fields.get("attributes") or {}
    capacity = fields.get("capacity") or {}
    if isinstance(capacity, Mapping):
        fields["capacity"] = {name: _amount(value) for name, value in capacity.items()}
    taints = fields.pop("taints", None) or []
    if taints:
        fields["taints"] = [
            (t.get("key"), t.get("value") or "", t.get("effect")) if isinstance(t, Mapping) else t
            for t in taints
        ]
    return fields


def _amount(capacity: Any) -> Any:
    """A capacity's value by amount (``1Ki`` is ``1024``); as it is where it is no plain quantity."""
    value = capacity.get("value") if isinstance(capacity, Mapping) else None
    found = _QUANTITY.fullmatch(value) if isinstance(value, str) else None
    if found is None or not isinstance(capacity, Mapping) or len(capacity) != 1:
        return capacity
    return int(found[1]) * _FACTORS[found[2] or ""]
