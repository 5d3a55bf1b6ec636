"""The protocol code checked in is what the pinned generators make of our .proto files, byte for byte
(slow: the generators' venv comes from PyPI), its versions are the pins and the kubernetes extra's
floors, and it describes the API the kubelet and containerd speak: the published package, method paths
and field numbers."""

from __future__ import annotations

import tomllib

import pytest

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
    assert sorted(floors) == ["grpcio", "protobuf"], floors
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
