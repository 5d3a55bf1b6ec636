"""The node's ResourceSlices reconciled: the plan alone (which slices to delete, replace, create, under
which generation), and the publisher through the official client against the API server stand-in
(unchanged re-publish writes nothing, a change bumps the generation and deletes first, more than 128
devices make two slices, wiped slices come back on resync, a change of taints is a new generation and
taints a server drops are no longer sent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from cdictk.dra.kubeclient import KubeClient, KubeError
from cdictk.dra.nodedevices import DraDevice, Taint
from cdictk.dra.publisher import Plan, Publisher, plan
from cdictk.dra.slices import MAX_DEVICES, V1, V1BETA1, resource_slices
from tests.e2e.kubelet.apiserver import ApiServer, Refusal, running

DRIVER = "gpu.nvidia.com"
NODE = "node1"


def gpu(minor: int) -> DraDevice:
    return DraDevice(f"gpu-{minor}", "gpu", {"type": "gpu", "uuid": f"GPU-{minor}"}, {"memory": 80 << 30})


def listed(devices: list[DraDevice], generation: int, *, api_version: str = V1) -> list[dict[str, Any]]:
    """Slices as a server lists them after creating them: named, with a resource version."""
    slices = resource_slices(devices, NODE, generation=generation, api_version=api_version)
    for at, item in enumerate(slices):
        metadata = item["metadata"]
        metadata["name"] = metadata.pop("generateName") + "abcde"
        metadata["resourceVersion"] = str(10 + at)
    return slices


def planned(published: list[dict[str, Any]], devices: list[DraDevice], **options: Any) -> Plan:
    return plan(
        published, devices, driver=DRIVER, node=NODE, api_version=options.pop("api_version", V1), **options
    )


# ---------------------------------------------------------------- the plan


def test_nothing_published_creates_one_slice_even_without_devices() -> None:
    steps = planned([], [])
    assert steps.generation == 1 and not steps.delete and not steps.replace
    ((created),) = steps.create
    assert "devices" not in created["spec"] and created["spec"]["pool"]["generation"] == 1


def test_the_same_devices_again_change_nothing() -> None:
    for api_version in (V1, V1BETA1):
        steps = planned(
            listed([gpu(0), gpu(1)], 3, api_version=api_version), [gpu(1), gpu(0)], api_version=api_version
        )
        assert steps == Plan(3) and steps.unchanged


def test_a_change_replaces_in_place_under_the_next_generation() -> None:
    published = listed([gpu(0), gpu(1)], 3)
    steps = planned(published, [gpu(0)])
    assert steps.generation == 4 and not steps.delete and not steps.create
    ((name, body),) = steps.replace
    assert name == published[0]["metadata"]["name"]
    assert body["metadata"]["name"] == name and body["metadata"]["resourceVersion"] == "10"
    assert "generateName" not in body["metadata"]
    assert body["spec"]["pool"]["generation"] == 4
    assert [device["name"] for device in body["spec"]["devices"]] == ["gpu-0"]


def test_a_smaller_pool_deletes_the_slices_it_no_longer_counts() -> None:
    many = [gpu(minor) for minor in range(MAX_DEVICES + 1)]
    published = listed(many, 1)
    assert len(published) == 2
    steps = planned(published, many[:1])
    assert steps.delete == (published[1]["metadata"]["name"],)
    assert [name for name, _ in steps.replace] == [published[0]["metadata"]["name"]]
    assert steps.create == () and steps.generation == 2


def test_slices_of_another_scheme_or_a_doubled_index_are_deleted() -> None:
    published = listed([gpu(0)], 2)
    stray = listed([gpu(0)], 1)[0]
    stray["metadata"]["name"] = "mine-gpu.nvidia.com-node1-zzzzz"
    twin = listed([gpu(0)], 2)[0]
    twin["metadata"]["name"] = "00000-gpu.nvidia.com-node1-fghij"
    steps = planned([*published, stray, twin], [gpu(0)])
    assert set(steps.delete) == {stray["metadata"]["name"], twin["metadata"]["name"]}
    assert [name for name, _ in steps.replace] == [published[0]["metadata"]["name"]]
    assert steps.generation == 3


def test_generations_never_go_back_after_a_wipe() -> None:
    steps = planned([], [gpu(0)], seen_generation=7)
    assert steps.generation == 8 and len(steps.create) == 1


def test_mixed_generations_are_written_again() -> None:
    published = listed([gpu(minor) for minor in range(MAX_DEVICES + 1)], 1)
    published[1]["spec"]["pool"]["generation"] = 2
    steps = planned(published, [gpu(minor) for minor in range(MAX_DEVICES + 1)])
    assert steps.generation == 3 and len(steps.replace) == 2


# ---------------------------------------------------------------- through the client


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with running() as started:
        started.add_node(NODE)
        yield started


@pytest.fixture
def kube(server: ApiServer, tmp_path: Path) -> Iterator[KubeClient]:
    made = KubeClient.from_kubeconfig(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    yield made
    made.close()


def pool(server: ApiServer) -> list[tuple[str, int, list[str]]]:
    """The node's slices on the server: name, generation, device names."""
    return [
        (
            name,
            item["spec"]["pool"]["generation"],
            [device["name"] for device in item["spec"].get("devices", [])],
        )
        for name, item in sorted(server.slices.items())
        if item["spec"]["nodeName"] == NODE
    ]


def test_publish_then_the_same_again_writes_nothing(server: ApiServer, kube: KubeClient) -> None:
    devices = [gpu(0), gpu(1)]
    publisher = Publisher(kube, DRIVER, NODE, lambda: devices)
    first = publisher.publish(devices)
    ((name, generation, names),) = pool(server)
    assert generation == first.generation == 1 and names == ["gpu-0", "gpu-1"]
    owner = server.slices[name]["metadata"]["ownerReferences"][0]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": server.nodes[NODE]["metadata"]["uid"],
        "controller": True,
    }
    writes = len(server.writes)
    again = publisher.publish(devices)
    assert again.unchanged and again.generation == 1
    assert len(server.writes) == writes and pool(server) == [(name, 1, names)]


def test_a_device_gone_then_added_bumps_the_generation(server: ApiServer, kube: KubeClient) -> None:
    publisher = Publisher(kube, DRIVER, NODE, list)
    publisher.publish([gpu(0), gpu(1)])
    ((name, _, _),) = pool(server)
    publisher.publish([gpu(0)])
    assert pool(server) == [(name, 2, ["gpu-0"])]
    publisher.publish([gpu(0), gpu(2)])
    assert pool(server) == [(name, 3, ["gpu-0", "gpu-2"])]
    assert [write.verb for write in server.writes] == ["create", "update", "update"]


def test_more_than_128_devices_make_two_slices_and_fewer_delete_one_first(
    server: ApiServer, kube: KubeClient
) -> None:
    many = [gpu(minor) for minor in range(MAX_DEVICES + 2)]
    publisher = Publisher(kube, DRIVER, NODE, list)
    publisher.publish(many)
    slices = pool(server)
    assert [(generation, len(names)) for _, generation, names in slices] == [(1, MAX_DEVICES), (1, 2)]
    assert [name[:6] for name, _, _ in slices] == ["00000-", "00001-"]
    for item in server.slices.values():
        assert item["spec"]["pool"]["resourceSliceCount"] == 2
    server.writes.clear()
    publisher.publish(many[:3])
    assert [(write.verb, write.name) for write in server.writes] == [
        ("delete", slices[1][0]),
        ("update", slices[0][0]),
    ]
    assert pool(server) == [(slices[0][0], 2, ["gpu-0", "gpu-1", "gpu-2"])]


def test_resync_publishes_again_what_the_kubelet_wiped(server: ApiServer, kube: KubeClient) -> None:
    devices = [gpu(0)]
    publisher = Publisher(kube, DRIVER, NODE, lambda: devices)
    publisher.publish(devices)
    assert publisher.resync().unchanged
    server.wipe(NODE)
    assert pool(server) == []
    again = publisher.resync()
    assert len(again.create) == 1
    ((_, generation, names),) = pool(server)
    assert generation == 2 and names == ["gpu-0"]
    # The devices the source gives now are what a resync publishes.
    devices.append(gpu(1))
    publisher.resync()
    assert pool(server)[0][1:] == (3, ["gpu-0", "gpu-1"])


def test_the_nodes_uid_is_read_once(server: ApiServer, kube: KubeClient) -> None:
    publisher = Publisher(kube, DRIVER, NODE, list)
    publisher.publish([])
    del server.nodes[NODE]
    publisher.publish([gpu(0)])  # no read of the Node, which is gone now
    assert pool(server)[0][1:] == (2, ["gpu-0"])


def test_v1beta1_slices_are_published_the_same_way(tmp_path: Path) -> None:
    with running(version="v1beta1") as server:
        server.add_node(NODE)
        kube = KubeClient.from_kubeconfig(
            str(server.write_kubeconfig(tmp_path / "kubeconfig")), api_version=V1BETA1
        )
        publisher = Publisher(kube, DRIVER, NODE, list)
        publisher.publish([gpu(0)])
        assert publisher.publish([gpu(0)]).unchanged
        ((item),) = server.slices.values()
        assert item["spec"]["devices"][0]["basic"]["attributes"]["type"] == {"string": "gpu"}


XID = Taint("gpu.nvidia.com/xid", "NoSchedule", "79", "2026-12-02T14:00:00Z")


def taints(server: ApiServer) -> dict[str, list[dict[str, str]]]:
    return {
        device["name"]: device["taints"]
        for item in server.slices.values()
        for device in item["spec"].get("devices", [])
        if "taints" in device
    }


def test_a_taint_and_its_end_are_each_a_new_generation(server: ApiServer, kube: KubeClient) -> None:
    publisher = Publisher(kube, DRIVER, NODE, list)
    publisher.publish([gpu(0), gpu(1)])
    tainted = [gpu(0), dataclasses.replace(gpu(1), taints=(XID,))]
    assert publisher.publish(tainted).generation == 2
    assert list(taints(server)) == ["gpu-1"]
    ((sent,),) = taints(server).values()
    # the client sends the time as a datetime of its model writes it: the same instant
    assert datetime.fromisoformat(sent.pop("timeAdded")) == datetime.fromisoformat(XID.time_added)
    assert sent == {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    assert publisher.publish(tainted).unchanged and not publisher.taints_dropped
    assert publisher.publish([gpu(0), gpu(1)]).generation == 3
    assert taints(server) == {}


def test_taints_a_server_drops_are_no_longer_sent(tmp_path: Path) -> None:
    with running(device_taints=False) as server:
        server.add_node(NODE)
        kube = KubeClient.from_kubeconfig(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        publisher = Publisher(kube, DRIVER, NODE, list)
        publisher.publish([gpu(0)])
        tainted = [dataclasses.replace(gpu(0), taints=(XID,))]
        assert publisher.publish(tainted).generation == 2  # sent once: the answer has none
        assert publisher.taints_dropped and taints(server) == {}
        writes = len(server.writes)
        assert publisher.publish(tainted).unchanged  # not a new generation at every resync
        assert publisher.publish([gpu(0)]).unchanged and len(server.writes) == writes
        kube.close()


def test_a_refused_write_is_one_line_and_the_next_publish_recovers(
    server: ApiServer, kube: KubeClient
) -> None:
    publisher = Publisher(kube, DRIVER, NODE, list)
    publisher.publish([gpu(0)])
    ((name, _, _),) = pool(server)
    server.refusals.append(
        Refusal(422, "Invalid", f'ResourceSlice.resource.k8s.io "{name}" is invalid: spec: Too many')
    )
    with pytest.raises(KubeError) as raised:
        publisher.publish([gpu(1)])
    assert str(raised.value) == (
        f"replace ResourceSlice {name}: 422 Unprocessable Entity: "
        f'ResourceSlice.resource.k8s.io "{name}" is invalid: spec: Too many'
    )
    assert pool(server) == [(name, 1, ["gpu-0"])]
    publisher.publish([gpu(1)])
    assert pool(server) == [(name, 2, ["gpu-1"])]


def test_a_slice_already_gone_when_deleted_is_as_wanted(server: ApiServer, kube: KubeClient) -> None:
    publisher = Publisher(kube, DRIVER, NODE, list)
    publisher.publish([gpu(minor) for minor in range(MAX_DEVICES + 1)])
    server.refusals.append(Refusal(404, "NotFound", "gone"))
    steps = publisher.publish([gpu(0)])
    assert len(steps.delete) == 1
    assert [generation for _, generation, _ in pool(server)] == [2, 1]  # the refused delete left it
