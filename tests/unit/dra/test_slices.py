"""ResourceSlices from DRA devices: their shape in resource.k8s.io/v1 and v1beta1 (validated against
the official schemas by kubernetes-validate, strict), the split at 128 devices, the API's limits, and
whether published slices differ from wanted ones (taints by key, value and effect)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import os
from typing import Any

import pytest

from cdictk.dra.nodedevices import DraDevice, Taint, Version, node_devices
from cdictk.dra.slices import (
    MAX_DEVICES,
    MAX_TAINTED_DEVICES,
    V1,
    V1BETA1,
    SliceError,
    index_width,
    quantity,
    resource_slices,
    slice_index,
    slices_differ,
)
from cdictk.node.facts import discover
from cdictk.node.modes import Mode
from tests.conftest import NodeFactory, roots_of

NODE = "node1"
UID = "5b2c3f0e-8a1d-4e6b-9c7f-0123456789ab"
GPU = DraDevice(
    "gpu-1",
    "gpu",
    {
        "type": "gpu",
        "uuid": "GPU-1",
        "driverVersion": Version("580.95.5"),
        "resource.kubernetes.io/numaNode": 0,
        "resource.kubernetes.io/pciBusID": "0000:2a:00.0",
    },
    {"memory": 81559 << 20},
)
MIG = DraDevice(
    "gpu-0-mig-1g10gb-19-4",
    "mig",
    {"type": "mig", "profile": "1g.10gb"},
    {"memory": 9856 << 20, "multiprocessors": 16, "memorySlice4": 1},
)
# Each Kubernetes the v1 slices are checked against (1.34 made the API v1, and the newest bundled),
# and each v1beta1 is checked against (1.32 introduced it, 1.33 still had no v1).
V1_KUBERNETES = ("1.34.0", "1.37.0")
V1BETA1_KUBERNETES = ("1.32.0", "1.33.0", "1.34.0", "1.37.0")


def validator() -> Any:
    try:
        return importlib.import_module("kubernetes_validate")
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("kubernetes-validate is not installed; it is in the project's dev dependency group")
        pytest.skip("kubernetes-validate is not installed (pip install --group dev)")


def validate(slices: list[dict[str, Any]], api_version: str) -> None:
    check = validator()
    for version in V1_KUBERNETES if api_version == V1 else V1BETA1_KUBERNETES:
        for item in slices:
            check.validate(item, version, strict=True)


def published(wanted: list[dict[str, Any]], generation: int = 3) -> list[dict[str, Any]]:
    """``wanted`` as the API server gives them back: named from their generateName, with metadata
    of its own and the pool's generation it was written under."""
    items = copy.deepcopy(wanted)
    for number, item in enumerate(items):
        metadata = item["metadata"]
        metadata["name"] = metadata.pop("generateName") + f"x{number:04d}"
        metadata |= {
            "uid": f"uid-{number}",
            "resourceVersion": "42",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        }
        item["spec"]["pool"]["generation"] = generation
    return items


def many(count: int) -> list[DraDevice]:
    return [DraDevice(f"gpu-{n}", "gpu", {"type": "gpu"}, {"memory": 1 << 30}) for n in range(count)]


# ---- shape ------------------------------------------------------------------------------------


def test_v1_devices_carry_attributes_and_capacities_beside_their_name() -> None:
    (item,) = resource_slices([GPU, MIG], NODE, node_uid=UID)
    assert item == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": "00000-gpu.nvidia.com-node1-",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID, "controller": True}
            ],
        },
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "nodeName": NODE,
            "devices": [  # sorted by name
                {
                    "name": "gpu-0-mig-1g10gb-19-4",
                    "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb"}},
                    "capacity": {
                        "memory": {"value": "9856Mi"},
                        "multiprocessors": {"value": "16"},
                        "memorySlice4": {"value": "1"},
                    },
                },
                {
                    "name": "gpu-1",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": "GPU-1"},
                        "driverVersion": {"version": "580.95.5"},
                        "resource.kubernetes.io/numaNode": {"int": 0},
                        "resource.kubernetes.io/pciBusID": {"string": "0000:2a:00.0"},
                    },
                    "capacity": {"memory": {"value": "81559Mi"}},
                },
            ],
        },
    }
    validate([item], V1)


def test_v1beta1_wraps_each_device_in_basic() -> None:
    (item,) = resource_slices([MIG, GPU], NODE, api_version=V1BETA1, driver="gpu.example.com", generation=7)
    assert item["apiVersion"] == "resource.k8s.io/v1beta1"
    assert item["metadata"] == {"generateName": "00000-gpu.example.com-node1-"}  # no UID: no owner
    assert item["spec"]["driver"] == "gpu.example.com"
    assert item["spec"]["pool"] == {"name": NODE, "generation": 7, "resourceSliceCount": 1}
    first = item["spec"]["devices"][0]
    assert first == {
        "name": "gpu-0-mig-1g10gb-19-4",
        "basic": {
            "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb"}},
            "capacity": {
                "memory": {"value": "9856Mi"},
                "multiprocessors": {"value": "16"},
                "memorySlice4": {"value": "1"},
            },
        },
    }
    validate([item], V1BETA1)


def test_the_v1_shape_is_refused_as_v1beta1_and_back() -> None:
    # What tells the two apart: were the schemas lax, the shape tests above would prove nothing.
    check = validator()
    (v1,) = resource_slices([GPU], NODE)
    v1["apiVersion"] = V1BETA1
    with pytest.raises(check.ValidationError):
        check.validate(v1, "1.34.0", strict=True)
    (beta,) = resource_slices([GPU], NODE, api_version=V1BETA1)
    beta["apiVersion"] = V1
    with pytest.raises(check.ValidationError):
        check.validate(beta, "1.34.0", strict=True)


def test_a_node_without_devices_gets_one_empty_slice() -> None:
    (item,) = resource_slices([], NODE)
    assert "devices" not in item["spec"]
    assert item["spec"]["pool"]["resourceSliceCount"] == 1
    validate([item], V1)


@pytest.mark.root
@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_the_fake_nodes_devices_are_valid_slices(make_node: NodeFactory, api_version: str) -> None:
    devices = node_devices(discover(roots_of(make_node("eight")), Mode.AUTO)).devices
    slices = resource_slices(devices, "gpu-node-7", api_version=api_version, node_uid=UID)
    assert len(slices) == 1 and len(slices[0]["spec"]["devices"]) == 10
    validate(slices, api_version)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1, "1"),
        (1023, "1023"),
        (1024, "1Ki"),
        (1536, "1536"),
        (81559 << 20, "81559Mi"),
        (40 << 30, "40Gi"),
        (1 << 70, "1024Ei"),
    ],
)
def test_quantities_are_written_as_kubernetes_writes_them_back(value: int, text: str) -> None:
    assert quantity(value) == text


# ---- splitting --------------------------------------------------------------------------------


def test_more_than_128_devices_are_split_in_order() -> None:
    devices = many(2 * MAX_DEVICES + 44)
    slices = resource_slices(list(reversed(devices)), NODE, generation=2)
    assert [len(item["spec"]["devices"]) for item in slices] == [128, 128, 44]
    assert [item["metadata"]["generateName"] for item in slices] == [
        f"0000{index}-gpu.nvidia.com-node1-" for index in range(3)
    ]
    assert {
        (item["spec"]["pool"]["generation"], item["spec"]["pool"]["resourceSliceCount"]) for item in slices
    } == {(2, 3)}
    names = [device["name"] for item in slices for device in item["spec"]["devices"]]
    assert names == sorted(device.name for device in devices)
    validate(slices, V1)


XID = Taint("gpu.nvidia.com/xid", "NoSchedule", "79", "2026-12-02T14:00:00Z")
LOST = Taint("gpu.nvidia.com/gpu-lost", "NoSchedule", time_added="2026-12-02T14:00:01Z")
UNMONITORED = Taint("gpu.nvidia.com/unmonitored", "None", time_added="2026-12-02T14:00:02Z")


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_a_tainted_device_carries_its_taints_and_its_slices_validate(api_version: str) -> None:
    tainted = dataclasses.replace(GPU, taints=(XID, LOST))
    (item,) = resource_slices(
        [tainted, dataclasses.replace(MIG, taints=(UNMONITORED,))], NODE, api_version=api_version
    )
    mig, gpu = (device.get("basic", device) for device in item["spec"]["devices"])
    assert gpu["taints"] == [
        {
            "key": "gpu.nvidia.com/xid",
            "value": "79",
            "effect": "NoSchedule",
            "timeAdded": "2026-12-02T14:00:00Z",
        },
        {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule", "timeAdded": "2026-12-02T14:00:01Z"},
    ]
    assert mig["taints"] == [
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None", "timeAdded": "2026-12-02T14:00:02Z"}
    ]
    assert "taints" not in resource_slices([GPU], NODE, api_version=api_version)[0]["spec"]["devices"][0]
    check = validator()
    # v1 at 1.34 and 1.37; v1beta1 from 1.33, the first with taints (1.32's server drops the field
    # it does not know, as one without the feature gate drops it)
    for version in V1_KUBERNETES if api_version == V1 else ("1.33.0", "1.34.0", "1.37.0"):
        check.validate(item, version, strict=True)


def test_a_pool_with_a_tainted_device_has_at_most_64_devices_a_slice() -> None:
    devices = many(MAX_DEVICES)
    assert len(resource_slices(devices, NODE)) == 1
    devices[100] = dataclasses.replace(devices[100], taints=(XID,))
    slices = resource_slices(devices, NODE)
    assert [len(item["spec"]["devices"]) for item in slices] == [MAX_TAINTED_DEVICES, MAX_TAINTED_DEVICES]
    assert {item["spec"]["pool"]["resourceSliceCount"] for item in slices} == {2}
    validate(slices, V1)


def test_taints_differ_by_key_value_and_effect_not_by_their_time() -> None:
    wanted = resource_slices([dataclasses.replace(GPU, taints=(XID,))], NODE)
    back = published(wanted)
    assert not slices_differ(back, wanted)
    (taint,) = back[0]["spec"]["devices"][0]["taints"]
    taint["timeAdded"] = "2026-12-01T09:00:00Z"  # a restarted plugin's taint, published before
    assert not slices_differ(back, wanted)
    for field, value in (("value", "48"), ("effect", "NoExecute"), ("key", "gpu.nvidia.com/gpu-lost")):
        other = copy.deepcopy(back)
        other[0]["spec"]["devices"][0]["taints"][0][field] = value
        assert slices_differ(other, wanted), field
    untainted = copy.deepcopy(back)
    del untainted[0]["spec"]["devices"][0]["taints"]  # recovered, or dropped by the server
    assert slices_differ(untainted, wanted)
    assert slices_differ(back, resource_slices([GPU], NODE))


def test_the_index_grows_past_five_hex_digits() -> None:
    assert [index_width(count) for count in (0, 1, 0x100000, 0x100001)] == [5, 5, 5, 6]
    assert slice_index("0000a-gpu.nvidia.com-node1-x7k2p", 11) == 10
    assert slice_index("000a-gpu.nvidia.com-node1-x7k2p", 11) is None  # another width
    assert slice_index("0000g-gpu.nvidia.com-node1-x7k2p", 11) is None
    assert slice_index("gpu-node1", 1) is None


# ---- limits -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "said"),
    [
        (
            DraDevice("gpu-0", "gpu", {"productName": "x" * 65}, {}),
            "device gpu-0: attribute productName is 65 characters long, more than 64",
        ),
        (
            DraDevice("gpu-0", "gpu", {"driverVersion": Version("1." * 32 + "0")}, {}),
            "device gpu-0: attribute driverVersion is 65 characters long, more than 64",
        ),
        (
            DraDevice("gpu-0", "gpu", {f"a{n}": n for n in range(20)}, {f"c{n}": n for n in range(13)}),
            "device gpu-0: 20 attributes and 13 capacities, more than the 32 a device may have",
        ),
        (DraDevice("GPU_0", "gpu", {}, {}), "device 'GPU_0': its name is no DNS label"),
        (
            DraDevice("gpu-0", "gpu", {"not-an-identifier": 1}, {}),
            "device gpu-0: 'not-an-identifier' is no attribute or capacity name (driver gpu.nvidia.com)",
        ),
        (
            DraDevice("gpu-0", "gpu", {}, {"x" * 33: 1}),
            f"device gpu-0: {'x' * 33!r} is no attribute or capacity name (driver gpu.nvidia.com)",
        ),
        (
            DraDevice("gpu-0", "gpu", {"Bad_Domain/name": 1}, {}),
            "device gpu-0: 'Bad_Domain/name' is no attribute or capacity name (driver gpu.nvidia.com)",
        ),
        (DraDevice("gpu-0", "gpu", {}, {"memory": -1}), "capacity -1 is negative"),
        (
            DraDevice("gpu-0", "gpu", {}, {}, tuple(Taint(f"t/k{n}", "NoSchedule") for n in range(17))),
            "device gpu-0: 17 taints, more than 16",
        ),
    ],
)
def test_what_the_api_server_would_refuse_is_refused_first(device: DraDevice, said: str) -> None:
    with pytest.raises(SliceError) as caught:
        resource_slices([device], NODE)
    assert str(caught.value) == said


def test_the_limits_themselves_pass() -> None:
    device = DraDevice(
        "gpu-0",
        "gpu",
        {"productName": "x" * 64, **{f"a{n}": n for n in range(20)}, "example.com/" + "y" * 32: True},
        {f"c{n}": n for n in range(10)},
    )
    validate(resource_slices([device], NODE), V1)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"api_version": "resource.k8s.io/v1beta2"}, "unknown API version 'resource.k8s.io/v1beta2'"),
        ({"driver": "GPU"}, "driver name 'GPU' is no DNS subdomain of at most 63 characters"),
        ({"generation": 0}, "generation 0 is below 1"),
    ],
)
def test_bad_arguments_are_refused(arguments: dict[str, Any], said: str) -> None:
    with pytest.raises(SliceError, match=said):
        resource_slices([GPU], NODE, **arguments)


def test_a_bad_node_name_or_two_devices_of_one_name_are_refused() -> None:
    with pytest.raises(SliceError, match="node name 'Node_1' is no DNS subdomain"):
        resource_slices([GPU], "Node_1")
    with pytest.raises(SliceError, match="device gpu-1: two devices of that name in one pool"):
        resource_slices([GPU, GPU], NODE)


# ---- differ -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_slices_as_the_api_server_gives_them_back_do_not_differ(api_version: str) -> None:
    wanted = resource_slices([*many(200), MIG], NODE, api_version=api_version, node_uid=UID)
    back = published(wanted)
    assert not slices_differ(back, wanted)
    assert not slices_differ(list(reversed(back)), wanted)  # listed in any order
    # A quantity in another spelling is the same amount.
    respelled = copy.deepcopy(back)
    device = next(d for item in respelled for d in item["spec"]["devices"] if d["name"] == "gpu-150")
    body = device.get("basic", device)
    assert body["capacity"]["memory"] == {"value": "1Gi"}
    body["capacity"]["memory"]["value"] = str(1 << 30)
    assert not slices_differ(respelled, wanted)


def test_an_empty_pool_published_is_the_same() -> None:
    wanted = resource_slices([], NODE)
    assert not slices_differ(published(wanted), wanted)


def change(items: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    items = copy.deepcopy(items)
    first = items[0]
    devices = first["spec"]["devices"]
    if what == "attribute":
        devices[0]["attributes"]["type"] = {"string": "mig"}
    elif what == "capacity":
        devices[0]["capacity"]["memory"] = {"value": "2Gi"}
    elif what == "device gone":
        del devices[0]
    elif what == "order":
        devices[0], devices[1] = devices[1], devices[0]
    elif what == "taint":
        devices[0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    elif what == "one more slice":
        extra = copy.deepcopy(first)
        extra["metadata"]["name"] = "00002-gpu.nvidia.com-node1-zzzzz"
        items.append(extra)
    elif what == "one slice less":
        del items[1]
    elif what == "mixed generations":
        first["spec"]["pool"]["generation"] = 2
    elif what == "no index":
        first["metadata"]["name"] = "gpu-slice-a"
    elif what == "index twice":
        items[1]["metadata"]["name"] = first["metadata"]["name"] + "b"
    elif what == "slice count":
        first["spec"]["pool"]["resourceSliceCount"] = 3
    elif what == "node":
        first["spec"]["nodeName"] = "node2"
    elif what == "driver":
        first["spec"]["driver"] = "gpu.example.com"
    elif what == "pool":
        first["spec"]["pool"]["name"] = "node2"
    return items


@pytest.mark.parametrize(
    "what",
    [
        "attribute",
        "capacity",
        "device gone",
        "order",
        "taint",
        "one more slice",
        "one slice less",
        "mixed generations",
        "no index",
        "index twice",
        "slice count",
        "node",
        "driver",
        "pool",
    ],
)
def test_any_change_differs(what: str) -> None:
    wanted = resource_slices(many(200), NODE)
    assert len(wanted) == 2
    assert slices_differ(change(published(wanted), what), wanted)


def test_nothing_published_differs() -> None:
    assert slices_differ([], resource_slices([GPU], NODE))
