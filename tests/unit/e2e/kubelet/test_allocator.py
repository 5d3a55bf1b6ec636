"""The scheduler stand-in: DeviceClass and claim CEL evaluated on published devices as the scheduler
exposes them, taken devices passed over, the allocation written back valid, and released with the
last pod."""

from __future__ import annotations

from typing import Any

import pytest

from cdictk.dra.nodedevices import DraDevice
from cdictk.dra.slices import V1BETA1, resource_slices
from tests.e2e.kubelet.allocator import (
    AllocationError,
    Allocator,
    Pod,
    device_classes,
    published_devices,
    quantity,
    write_allocation,
)
from tests.e2e.kubelet.apiserver import ApiServer

NODE = "node1"
GPU = DraDevice("gpu-1", "gpu", {"type": "gpu", "uuid": "GPU-1", "productName": "H100"}, {"memory": 80 << 30})
GPU2 = DraDevice(
    "gpu-2", "gpu", {"type": "gpu", "uuid": "GPU-2", "productName": "H100"}, {"memory": 80 << 30}
)
MIG = DraDevice(
    "gpu-0-mig-1g10gb-19-4",
    "mig",
    {"type": "mig", "uuid": "MIG-1", "profile": "1g.10gb", "parentUUID": "GPU-0"},
    {"memory": 9856 << 20},
)
MIG3 = DraDevice(
    "gpu-0-mig-3g40gb-9-0",
    "mig",
    {"type": "mig", "uuid": "MIG-3", "profile": "3g.40gb", "parentUUID": "GPU-0"},
    {"memory": 40192 << 20},
)
POD = Pod("pod-a", "11111111-1111-1111-1111-111111111111")


def publish(server: ApiServer, devices: list[DraDevice], *, generation: int = 1, node: str = NODE) -> None:
    version = V1BETA1 if server.version == "v1beta1" else "resource.k8s.io/v1"
    for item in resource_slices(devices, node, api_version=version, generation=generation):
        code, answer = server.handle(
            "POST", f"/apis/resource.k8s.io/{server.version}/resourceslices", _json(item), None
        )
        assert code == 200, answer


def _json(item: dict[str, Any]) -> bytes:
    import json

    return json.dumps(item).encode()


def claim(
    name: str,
    device_class: str = "gpu.nvidia.com",
    *,
    selector: str = "",
    count: int = 1,
    admin: bool = False,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if admin:
        exactly["adminAccess"] = True
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": exactly}]}},
    }


@pytest.fixture
def server() -> ApiServer:
    server = ApiServer()
    publish(server, [GPU, GPU2, MIG, MIG3])
    return server


def results(stored: dict[str, Any]) -> list[dict[str, Any]]:
    return list(stored["status"]["allocation"]["devices"]["results"])


def test_the_device_classes_are_read_from_the_deploy_manifest() -> None:
    classes = device_classes()
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert "type == 'mig'" in classes["mig.nvidia.com"][0]


def test_a_mig_device_by_its_profile(server: ApiServer) -> None:
    server.put_claim(
        claim("mig", "mig.nvidia.com", selector="device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
    )
    stored = Allocator(server).allocate("default", "mig", NODE, [POD])
    assert results(stored) == [
        {"request": "req", "driver": "gpu.nvidia.com", "pool": NODE, "device": MIG.name}
    ]
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": POD.name, "uid": POD.uid}]
    selector = stored["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert selector["values"] == [NODE]


def test_the_class_keeps_whole_gpus_and_mig_devices_apart(server: ApiServer) -> None:
    server.put_claim(claim("two", count=2))
    stored = Allocator(server).allocate("default", "two", NODE, [POD])
    assert [r["device"] for r in results(stored)] == ["gpu-1", "gpu-2"]


def test_a_taken_device_is_passed_over_and_too_few_is_one_line(server: ApiServer) -> None:
    allocator = Allocator(server)
    server.put_claim(claim("a"))
    server.put_claim(claim("b"))
    server.put_claim(claim("c"))
    assert results(allocator.allocate("default", "a", NODE, [POD]))[0]["device"] == "gpu-1"
    assert results(allocator.allocate("default", "b", NODE, [POD]))[0]["device"] == "gpu-2"
    with pytest.raises(
        AllocationError, match=r"^claim default/c: request req wants 1 device\(s\) .* has 0 free"
    ):
        allocator.allocate("default", "c", NODE, [POD])
    server.put_claim(claim("admin", admin=True))  # admin access may take a device in use
    assert results(allocator.allocate("default", "admin", NODE, [POD]))[0] == {
        "request": "req", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1", "adminAccess": True,
    }  # fmt: skip


def test_capacity_by_quantity(server: ApiServer) -> None:
    selector = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) >= 0"
    server.put_claim(claim("big", "mig.nvidia.com", selector=selector))
    assert results(Allocator(server).allocate("default", "big", NODE, [POD]))[0]["device"] == MIG3.name
    assert quantity("4864Mi") == 4864 << 20 and quantity("2k") == 2000 and quantity("1536") == 1536
    with pytest.raises(ValueError, match="not a whole quantity"):
        quantity("1.5Gi")


def test_a_selector_that_fails_on_a_device_names_both(server: ApiServer) -> None:
    server.put_claim(claim("bad", selector="device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"))
    with pytest.raises(AllocationError, match=r"^CEL .*profile.* on device gpu-1: "):
        Allocator(server).allocate("default", "bad", NODE, [POD])


def test_only_the_latest_complete_generation_counts() -> None:
    server = ApiServer()
    publish(server, [GPU], generation=1)
    publish(server, [GPU2], generation=2)
    assert [d.name for d in published_devices(server, NODE)] == ["gpu-2"]
    publish(server, [MIG], node="node2")
    assert [d.name for d in published_devices(server, "node2")] == [MIG.name]
    incomplete = resource_slices([MIG3], "node3")[0]
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    assert server.handle("POST", "/apis/resource.k8s.io/v1/resourceslices", _json(incomplete), None)[0] == 200
    assert published_devices(server, "node3") == []


def test_v1beta1_slices_are_read_through_basic() -> None:
    server = ApiServer(version="v1beta1")
    publish(server, [MIG])
    [device] = published_devices(server, NODE)
    assert device.attributes["gpu.nvidia.com"]["profile"] == "1g.10gb"
    assert device.capacity["gpu.nvidia.com"]["memory"] == 9856 << 20


def test_a_shared_claim_is_reserved_and_released_with_its_last_pod(server: ApiServer) -> None:
    allocator = Allocator(server)
    other = Pod("pod-b", "22222222-2222-2222-2222-222222222222")
    server.put_claim(claim("shared"))
    allocator.allocate("default", "shared", NODE, [POD])
    stored = allocator.allocate("default", "shared", NODE, [other])
    assert [c["uid"] for c in stored["status"]["reservedFor"]] == [POD.uid, other.uid]
    allocator.release("default", "shared", POD.uid)
    assert results(server.claims[("default", "shared")])[0]["device"] == "gpu-1"
    allocator.release("default", "shared", other.uid)
    assert "allocation" not in server.claims[("default", "shared")]["status"]
    allocator.release("default", "gone", POD.uid)  # a deleted claim: nothing to do


def test_a_hand_written_allocation_is_stored_as_given(server: ApiServer) -> None:
    stored = server.put_claim(claim("elsewhere"))
    result = {"request": "req", "driver": "gpu.nvidia.com", "pool": "node9", "device": "gpu-1"}
    assert results(write_allocation(server, stored, [result], NODE, [POD])) == [result]
