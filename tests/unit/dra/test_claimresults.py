"""A claim's allocation results as this node's driver takes them: its own in its own pool, the others'
ignored, and every claim it cannot prepare refused in one line."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cdictk.dra.claimresults import AllocatedDevice, ClaimError, allocated_devices

UID = "dab5ab50-7c1e-4b6a-9d5e-2f6c0e4a1b23"
DRIVER = "gpu.nvidia.com"
POOL = "node1"
DEVICES = {"gpu-0", "gpu-1", "gpu-2-mig-1g10gb-19-4"}


def result(device: str, request: str = "gpu", **more: Any) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": POOL, "device": device, **more}


def claim(*results: dict[str, Any], uid: str = UID, api: str = "resource.k8s.io/v1") -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": "ResourceClaim",
        "metadata": {"name": "pair", "namespace": "team", "uid": uid},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
        "status": {
            "allocation": {"devices": {"results": list(results)}, "nodeSelector": {}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "1"}],
        },
    }


def ours(found: dict[str, Any]) -> tuple[AllocatedDevice, ...]:
    return allocated_devices(
        found, uid=UID, driver=DRIVER, pool=POOL, devices=DEVICES, namespace="team", name="pair"
    )


def refused(found: dict[str, Any], uid: str = UID) -> str:
    with pytest.raises(ClaimError) as error:
        allocated_devices(
            found, uid=uid, driver=DRIVER, pool=POOL, devices=DEVICES, namespace="team", name="pair"
        )
    assert "\n" not in str(error.value)
    return str(error.value)


@pytest.mark.parametrize("api", ["resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"])
def test_a_whole_gpu_and_a_mig_device_in_any_api_version(api: str) -> None:
    found = claim(result("gpu-0"), result("gpu-2-mig-1g10gb-19-4", request="small"), api=api)
    assert ours(found) == (
        AllocatedDevice("gpu", POOL, "gpu-0"),
        AllocatedDevice("small", POOL, "gpu-2-mig-1g10gb-19-4"),
    )


def test_a_subrequest_is_answered_as_its_request() -> None:
    (device,) = ours(claim(result("gpu-1", request="gpu/large")))
    assert device.request == "gpu"


def test_admin_access_and_share_id_are_kept() -> None:
    share = "7f0c3b1e-1d2a-4e5f-8a9b-0c1d2e3f4a5b"
    found = claim(result("gpu-0", adminAccess=True), result("gpu-1", shareID=share, adminAccess=False))
    assert ours(found) == (
        AllocatedDevice("gpu", POOL, "gpu-0", admin_access=True),
        AllocatedDevice("gpu", POOL, "gpu-1", share_id=share),
    )


def test_other_drivers_results_are_ignored_and_none_of_ours_is_no_device() -> None:
    nic = {"request": "nic", "driver": "nic.example.com", "pool": "elsewhere", "device": "eth9"}
    assert ours(claim(nic, result("gpu-1"))) == (AllocatedDevice("gpu", POOL, "gpu-1"),)
    assert ours(claim(nic)) == ()
    assert ours(claim()) == ()


def test_an_unallocated_claim_is_refused() -> None:
    found = claim()
    del found["status"]["allocation"]
    assert refused(found) == "claim team/pair: not allocated"
    del found["status"]
    assert refused(found) == "claim team/pair: not allocated"


def test_a_claim_made_again_under_its_name_got_replaced() -> None:
    assert refused(claim(result("gpu-0"), uid="0b1c2d3e-0000-4000-8000-000000000000")) == (
        "claim team/pair: got replaced: its UID is '0b1c2d3e-0000-4000-8000-000000000000', "
        f"not '{UID}' as the kubelet asked"
    )


def test_a_result_of_ours_for_another_nodes_pool_is_refused() -> None:
    found = claim(result("gpu-0"), result("gpu-1", pool="node2"))
    assert (
        refused(found)
        == "claim team/pair: device gpu-1 of request gpu is allocated to another node's pool node2"
    )


def test_a_device_this_node_does_not_have_is_refused() -> None:
    assert (
        refused(claim(result("gpu-7")))
        == "claim team/pair: device gpu-7 of request gpu is not a device of this node"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(status="allocated"), "claim team/pair: status is not an object"),
        (lambda c: c["status"]["allocation"]["devices"].update(results={}), "results is not a list"),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"].append("gpu-0"),
            "results[1] is not an object",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].pop("device"),
            "results[0].device is missing or not a string",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].update(adminAccess="yes"),
            "results[0]: adminAccess is not a boolean or shareID not a string",
        ),
    ],
)
def test_a_claim_not_of_the_apis_shape_is_refused_in_one_line(change: Any, message: str) -> None:
    found = copy.deepcopy(claim(result("gpu-0")))
    change(found)
    assert message in refused(found)


def test_without_names_the_uid_says_which_claim() -> None:
    with pytest.raises(ClaimError, match=f"^claim {UID}: not allocated$"):
        allocated_devices({"metadata": {"uid": UID}}, uid=UID, driver=DRIVER, pool=POOL, devices=DEVICES)
