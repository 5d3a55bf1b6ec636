"""The protocol code checked in is what the pinned generators make of our .proto files, byte for byte
(slow: the generators' venv comes from PyPI), its versions are the pins and the kubernetes extra's
floors, and it describes the API the kubelet and containerd speak: the published package, method paths
and field numbers (the device plugin's, the DRA plugin's and plugin registration's, the CRI)."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor

from tests import REPO
from tests.protogen import GENERATORS, PROTOS, generate, header, outputs


@pytest.mark.slow
@pytest.mark.parametrize("proto", PROTOS)
def test_the_checked_in_code_is_the_proto_generated(proto: str) -> None:
    """After editing a .proto, or changing the generators' pins: make proto."""
    generated = generate(proto)
    assert sorted(generated) == sorted(outputs(proto))
    for name, content in generated.items():
        assert (REPO / name).read_bytes() == content, f"{name} is stale: make proto"


@pytest.mark.parametrize("proto", PROTOS)
def test_the_checked_in_code_names_the_pinned_generators(proto: str) -> None:
    """The fast check of the pins: a pin changed without make proto fails here, not only when slow."""
    for name in outputs(proto):
        assert (REPO / name).read_text().startswith(header(proto)), f"{name}: make proto"


def test_the_extras_floors_are_what_the_generated_code_accepts() -> None:
    """The code refuses a protobuf older than its protoc and a grpcio older than its grpcio-tools: a
    floor below fails at import, one above shuts out users for nothing."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    floors = dict(requirement.split(">=") for requirement in extra["kubernetes"])
    # The extra's third, the Kubernetes API client, is pure Python and not the generated code's.
    assert sorted(floors) == ["grpcio", "kubernetes", "protobuf"], floors
    for proto in PROTOS:
        stem = REPO / proto.removesuffix(".proto")
        messages = stem.with_name(stem.name + "_pb2.py").read_text()
        services = stem.with_name(stem.name + "_pb2_grpc.py").read_text()
        assert f"# Protobuf Python Version: {floors['protobuf']}\n" in messages
        assert f"GRPC_GENERATED_VERSION = '{floors['grpcio']}'\n" in services
    assert floors["grpcio"] == GENERATORS["grpcio-tools"]


def test_the_device_plugin_api_is_the_published_one() -> None:
    from cdictk.deviceplugin.proto import deviceplugin_pb2

    services = deviceplugin_pb2.DESCRIPTOR.services_by_name
    assert services["Registration"].full_name == "v1beta1.Registration"
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    numbers = {f.name: f.number for f in deviceplugin_pb2.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert numbers == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    numbers = {f.name: f.number for f in deviceplugin_pb2.RegisterRequest.DESCRIPTOR.fields}
    assert numbers == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}


def test_a_registration_and_a_device_list_survive_the_wire() -> None:
    from cdictk.deviceplugin.proto import deviceplugin_pb2 as pb

    request = pb.RegisterRequest(
        version="v1beta1",
        endpoint="cdictk-nvidia.com_gpu.sock",
        resource_name="nvidia.com/gpu",
        options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
    )
    assert pb.RegisterRequest.FromString(request.SerializeToString()) == request
    devices = pb.ListAndWatchResponse(
        devices=[
            pb.Device(ID="GPU-1", health="Healthy", topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)])),
            pb.Device(ID="GPU-2", health="Unhealthy"),
        ]
    )
    back = pb.ListAndWatchResponse.FromString(devices.SerializeToString())
    assert back == devices and not back.devices[1].HasField("topology")


def test_the_cri_is_the_published_one() -> None:
    from tests.e2e.kubelet import cri_pb2

    assert cri_pb2.DESCRIPTOR.package == "runtime.v1"
    numbers = {f.name: f.number for f in cri_pb2.ContainerConfig.DESCRIPTOR.fields}
    assert numbers["CDI_devices"] == 17 and numbers["linux"] == 15 and numbers["envs"] == 6


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_the_dra_api_is_the_published_one(version: str) -> None:
    """The method paths the kubelet calls, and the field numbers: v1beta1 is v1 without share_id."""
    from cdictk.dra.kubeletapi import dra_v1_pb2, dra_v1beta1_pb2

    pb = {"v1": dra_v1_pb2, "v1beta1": dra_v1beta1_pb2}[version]
    package = f"k8s.io.kubelet.pkg.apis.dra.{version}"
    assert pb.DESCRIPTOR.package == package
    service = pb.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert [f"/{service.full_name}/{m.name}" for m in service.methods] == [
        f"/{package}.DRAPlugin/NodePrepareResources",
        f"/{package}.DRAPlugin/NodeUnprepareResources",
    ]

    def numbers(message: Any) -> dict[str, tuple[int, int]]:
        return {f.name: (f.number, f.type) for f in message.DESCRIPTOR.fields}

    repeated = {f.name for f in pb.Device.DESCRIPTOR.fields if f.is_repeated}
    assert repeated == {"request_names", "cdi_device_ids"}

    string, message = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
    assert numbers(pb.Claim) == {"namespace": (1, string), "uid": (2, string), "name": (3, string)}
    device = {
        "request_names": (1, string),
        "pool_name": (2, string),
        "device_name": (3, string),
        "cdi_device_ids": (4, string),
    }
    if version == "v1":
        device["share_id"] = (5, string)
    assert numbers(pb.Device) == device
    assert numbers(pb.NodePrepareResourceResponse) == {"devices": (1, message), "error": (2, string)}
    assert numbers(pb.NodeUnprepareResourceResponse) == {"error": (1, string)}
    for request in (pb.NodePrepareResourcesRequest, pb.NodeUnprepareResourcesRequest):
        assert numbers(request) == {"claims": (1, message)}
    for response in (pb.NodePrepareResourcesResponse, pb.NodeUnprepareResourcesResponse):
        [claims] = response.DESCRIPTOR.fields
        assert (claims.name, claims.number, claims.message_type.GetOptions().map_entry) == ("claims", 1, True)
        assert claims.message_type.fields_by_name["key"].type == string  # the claim's UID


def test_a_dra_v1_share_id_is_optional_on_the_wire() -> None:
    from cdictk.dra.kubeletapi import dra_v1_pb2 as pb

    response = pb.NodePrepareResourcesResponse()
    response.claims["uid-1"].devices.add(
        request_names=["gpu"], pool_name="node1", device_name="gpu-0", cdi_device_ids=["k/c=uid-1-gpu-0"]
    )
    response.claims["uid-2"].error = "refused"
    back = pb.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    assert back == response and not back.claims["uid-1"].devices[0].HasField("share_id")
    shared = pb.Device(device_name="gpu-0", share_id="")
    assert pb.Device.FromString(shared.SerializeToString()).HasField("share_id")  # empty, yet set


def test_the_plugin_registration_api_is_the_published_one() -> None:
    from cdictk.dra.kubeletapi import pluginregistration_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["Registration"]
    assert [f"/{service.full_name}/{m.name}" for m in service.methods] == [
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    ]
    string = FieldDescriptor.TYPE_STRING
    info = {f.name: (f.number, f.type, f.is_repeated) for f in pb.PluginInfo.DESCRIPTOR.fields}
    assert info == {
        "type": (1, string, False),
        "name": (2, string, False),
        "endpoint": (3, string, False),
        "supported_versions": (4, string, True),
    }
    numbers = {f.name: (f.number, f.type) for f in pb.RegistrationStatus.DESCRIPTOR.fields}
    assert numbers == {
        "plugin_registered": (1, FieldDescriptor.TYPE_BOOL),
        "error": (2, string),
    }
    assert not pb.InfoRequest.DESCRIPTOR.fields and not pb.RegistrationStatusResponse.DESCRIPTOR.fields
