"""The scheduler's part of Dynamic Resource Allocation, for the API server stand-in: a ResourceClaim's
requests matched against the ResourceSlices stored there, and the allocation written back.

For each request (``exactly``: a DeviceClass, CEL selectors, a count, admin access) the devices of the
node's pools are tried in order (pool, then device name): a device matches when every selector of its
class, then every selector of the request, is true, as the scheduler evaluates them. A device another
allocated claim holds is passed over, unless both are admin access or this one is. The claim's
``status.allocation`` (results: request, driver, pool, device, ``adminAccess`` when asked; the node
selector of the node) and ``status.reservedFor`` (the pods) are written into the stand-in, where the
schema check applies to them as to any object; :meth:`Allocator.release` takes a gone pod out of
``reservedFor`` and the allocation with the last one, as the claim controller and scheduler do.

CEL is evaluated by cel-python, with the device as the scheduler exposes it: ``device.driver``,
``device.attributes[<domain>].<name>`` (an unqualified attribute is in the driver's domain),
``device.capacity[<domain>].<name>`` and ``device.allowMultipleAllocations``. Where this differs from
the scheduler: a capacity is an integer (its quantity's value), with the quantity methods the selectors
use (``compareTo``, ``isGreaterThan``, ``isLessThan``, ``asInteger``) and ``quantity('10Gi')`` giving
an integer too, so ``memory >= quantity('10Gi')`` passes here where the scheduler wants
``compareTo``; a version attribute is a string, with no ``semver()``. An expression that fails on a
device (a missing attribute, an unknown function) is an error naming both, as the scheduler reports it.

Only the latest generation of a pool counts, and a pool whose slices at that generation are not all
there is skipped (the scheduler waits for it). What it does not do: ``allocationMode: All``,
``firstAvailable``, constraints, configs, taints, counters, consumable capacity.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy import celtypes
from celpy.evaluation import CELEvalError

from tests.e2e.kubelet.apiserver import ApiServer

DEVICE_CLASSES = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "dra" / "deviceclasses.yaml"
_QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_FACTORS = {
    "": 1,
    **{suffix: 1024 ** (i + 1) for i, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{suffix: 1000 ** (i + 1) for i, suffix in enumerate(("k", "M", "G", "T", "P", "E"))},
}


class AllocationError(Exception):
    """Why a claim could not be allocated: one line."""


@dataclass(frozen=True)
class Device:
    """A device of a published pool, as allocation sees it."""

    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, Any]
    capacity: Mapping[str, Any]
    multiple: bool = False


@dataclass(frozen=True)
class Pod:
    """A pod a claim is reserved for."""

    name: str
    uid: str

    def consumer(self) -> dict[str, str]:
        return {"resource": "pods", "name": self.name, "uid": self.uid}


def device_classes(path: Path = DEVICE_CLASSES) -> dict[str, list[str]]:
    """The DeviceClasses of a manifest file: name -> their CEL expressions."""
    classes = {}
    for item in yaml.safe_load_all(path.read_text()):
        if item and item.get("kind") == "DeviceClass":
            selectors = item.get("spec", {}).get("selectors") or []
            classes[item["metadata"]["name"]] = [s["cel"]["expression"] for s in selectors]
    return classes


def quantity(text: str) -> int:
    """A whole quantity's value (``80Gi``, ``4864Mi``, ``1536``); ValueError for other forms."""
    found = _QUANTITY.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a whole quantity")
    factor: int = _FACTORS[found[2] or ""]
    return int(found[1]) * factor


def published_devices(server: ApiServer, node: str) -> list[Device]:
    """The devices of the complete pools that ``node``'s slices publish, latest generation only."""
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for item in server.slices.values():
        spec = item["spec"]
        if spec.get("nodeName") == node:
            pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(item)
    found = []
    for (driver, pool), items in sorted(pools.items()):
        latest = max(item["spec"]["pool"]["generation"] for item in items)
        current = [item for item in items if item["spec"]["pool"]["generation"] == latest]
        if any(item["spec"]["pool"]["resourceSliceCount"] != len(current) for item in current):
            continue  # a pool being rewritten: the scheduler waits for all of its slices
        devices = [device for item in current for device in item["spec"].get("devices") or []]
        for device in sorted(devices, key=lambda d: str(d["name"])):
            found.append(_device(driver, pool, node, device, server.version))
    return found


def _device(driver: str, pool: str, node: str, device: Mapping[str, Any], version: str) -> Device:
    body = device.get("basic", {}) if version == "v1beta1" else device
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (body.get("attributes") or {}).items():
        domain, _, ident = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[ident] = next(iter(value.values()))
    capacity: dict[str, dict[str, int]] = {}
    for name, value in (body.get("capacity") or {}).items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[ident] = quantity(str(value["value"]))
    return Device(
        driver,
        pool,
        str(device["name"]),
        node,
        attributes,
        capacity,
        bool(body.get("allowMultipleAllocations")),
    )


def _cel(value: Any) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    assert isinstance(value, Mapping), value
    return celtypes.MapType({celtypes.StringType(k): _cel(v) for k, v in value.items()})


def _compare(a: celtypes.IntType, b: celtypes.IntType) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


_FUNCTIONS: dict[str, Any] = {
    "quantity": lambda text: celtypes.IntType(quantity(str(text))),
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(a > b),
    "isLessThan": lambda a, b: celtypes.BoolType(a < b),
    "asInteger": celtypes.IntType,
}


class Selector:
    """One CEL expression, compiled once."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        environment = celpy.Environment()
        self._program = environment.program(environment.compile(expression), functions=_FUNCTIONS)

    def matches(self, device: Device) -> bool:
        activation = {
            "device": _cel(
                {
                    "driver": device.driver,
                    "attributes": device.attributes,
                    "capacity": device.capacity,
                    "allowMultipleAllocations": device.multiple,
                }
            )
        }
        try:
            result = self._program.evaluate(activation)
        except CELEvalError as error:
            raise AllocationError(
                f"CEL {self.expression!r} on device {device.name}: {error.args[0]}"
            ) from None
        if isinstance(result, CELEvalError):
            raise AllocationError(f"CEL {self.expression!r} on device {device.name}: {result.args[0]}")
        if not isinstance(result, celtypes.BoolType):
            raise AllocationError(f"CEL {self.expression!r} on device {device.name}: not a bool: {result!r}")
        return bool(result)


class Allocator:
    """Allocates claims stored in ``server`` from the devices ``server``'s slices publish."""

    def __init__(self, server: ApiServer, classes: Mapping[str, Sequence[str]] | None = None) -> None:
        self.server = server
        self.classes = {
            name: [Selector(e) for e in exprs] for name, exprs in (classes or device_classes()).items()
        }

    def allocate(self, namespace: str, name: str, node: str, pods: Sequence[Pod]) -> dict[str, Any]:
        """Allocate the stored claim on ``node`` and reserve it for ``pods``; the stored claim."""
        claim = self._claim(namespace, name)
        if (claim.get("status") or {}).get("allocation"):
            return self.reserve(namespace, name, pods)
        taken = self._taken()
        results = []
        chosen: set[tuple[str, str, str]] = set()
        for request in claim["spec"]["devices"].get("requests") or []:
            exactly = request.get("exactly")
            if exactly is None:
                raise AllocationError(
                    f"request {request['name']}: only 'exactly' requests are allocated here"
                )
            if exactly.get("allocationMode", "ExactCount") != "ExactCount":
                raise AllocationError(
                    f"request {request['name']}: allocationMode {exactly['allocationMode']}"
                )
            class_name = exactly["deviceClassName"]
            if class_name not in self.classes:
                raise AllocationError(f"request {request['name']}: no DeviceClass {class_name}")
            selectors = [
                *self.classes[class_name],
                *(Selector(s["cel"]["expression"]) for s in exactly.get("selectors") or []),
            ]
            admin = bool(exactly.get("adminAccess"))
            count = int(exactly.get("count", 1))
            picked = []
            for device in published_devices(self.server, node):
                key = (device.driver, device.pool, device.name)
                if key in chosen or (not admin and key in taken):
                    continue
                if all(selector.matches(device) for selector in selectors):
                    picked.append(device)
                    chosen.add(key)
                    if len(picked) == count:
                        break
            if len(picked) < count:
                raise AllocationError(
                    f"claim {namespace}/{name}: request {request['name']} wants {count} device(s) of class "
                    f"{class_name}, node {node} has {len(picked)} free that match"
                )
            for device in picked:
                result = {
                    "request": request["name"],
                    "driver": device.driver,
                    "pool": device.pool,
                    "device": device.name,
                }
                if admin:
                    result["adminAccess"] = True
                results.append(result)
        return write_allocation(self.server, claim, results, node, pods)

    def reserve(self, namespace: str, name: str, pods: Sequence[Pod]) -> dict[str, Any]:
        """Add ``pods`` to an allocated claim's ``reservedFor`` (a claim shared by several pods)."""
        claim = self._claim(namespace, name)
        status = dict(claim["status"])
        reserved = list(status.get("reservedFor") or [])
        reserved += [pod.consumer() for pod in pods if pod.consumer() not in reserved]
        status["reservedFor"] = reserved
        return self.server.put_claim({**claim, "status": status})

    def release(self, namespace: str, name: str, pod_uid: str) -> None:
        """The pod is gone: drop it from the claim's ``reservedFor``, and the allocation with the last
        one (the claim controller's and the scheduler's part). A claim that is gone is left so."""
        claim = self.server.claims.get((namespace, name))
        if claim is None:
            return
        status = dict(claim.get("status") or {})
        reserved = [c for c in status.get("reservedFor") or [] if c.get("uid") != pod_uid]
        status["reservedFor"] = reserved
        if not reserved:
            status = {k: v for k, v in status.items() if k not in {"allocation", "reservedFor"}}
        self.server.put_claim({**claim, "status": status})

    def _claim(self, namespace: str, name: str) -> dict[str, Any]:
        claim = self.server.claims.get((namespace, name))
        if claim is None:
            raise AllocationError(f"no ResourceClaim {namespace}/{name}")
        return claim

    def _taken(self) -> set[tuple[str, str, str]]:
        """The devices allocated to claims already, admin access aside."""
        taken = set()
        for claim in self.server.claims.values():
            allocation = (claim.get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                if not result.get("adminAccess"):
                    taken.add((result["driver"], result["pool"], result["device"]))
        return taken


def write_allocation(
    server: ApiServer,
    claim: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    node: str,
    pods: Sequence[Pod],
) -> dict[str, Any]:
    """Store ``claim`` allocated with ``results`` on ``node`` and reserved for ``pods``, as the scheduler
    writes it (a test may write results the scheduler would not, such as another node's pool)."""
    allocation = {
        "devices": {"results": [dict(result) for result in results]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    status = {
        **(claim.get("status") or {}),
        "allocation": allocation,
        "reservedFor": [pod.consumer() for pod in pods],
    }
    return server.put_claim({**claim, "status": status})
