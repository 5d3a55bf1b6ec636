"""Every dataclass of the device plugin API is its message in deviceplugin.proto, field for field, with
the published field numbers; and each survives the wire."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from cdictk.deviceplugin import messages
from cdictk.deviceplugin.messages import CODEC, PROTO, SCHEMA
from cdictk.deviceplugin.protocol import binpb_path

CLASSES = [
    value
    for _, value in inspect.getmembers(messages, inspect.isclass)
    if dataclasses.is_dataclass(value) and value.__module__ == messages.__name__
]
# From k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto.
PUBLISHED = {
    "RegisterRequest": {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    "DevicePluginOptions": {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    "Device": {"ID": 1, "health": 2, "topology": 3},
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    },
    "Mount": {"container_path": 1, "host_path": 2, "read_only": 3},
    "DeviceSpec": {"container_path": 1, "host_path": 2, "permissions": 3},
    "CDIDevice": {"name": 1},
}


def test_every_message_of_the_proto_has_its_dataclass() -> None:
    files = descriptor_pb2.FileDescriptorSet.FromString(Path(binpb_path(PROTO)).read_bytes())
    assert {cls.__name__ for cls in CLASSES} == {message.name for message in files.file[0].message_type}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_dataclass_has_the_messages_fields(cls: type) -> None:
    descriptor = SCHEMA.descriptor(cls.__name__)
    assert [f.name for f in dataclasses.fields(cls)] == [f.name for f in descriptor.fields]
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_field_numbers_are_the_published_ones(name: str) -> None:
    assert {f.name: f.number for f in SCHEMA.descriptor(name).fields} == PUBLISHED[name]


def test_a_registration_and_a_device_list_survive_the_wire() -> None:
    request = messages.RegisterRequest(
        messages.VERSION,
        "cdictk-nvidia.com_gpu.sock",
        "nvidia.com/gpu",
        messages.DevicePluginOptions(False, True),
    )
    assert CODEC.decode(messages.RegisterRequest, CODEC.encode(request)) == request
    devices = messages.ListAndWatchResponse(
        [
            messages.Device("GPU-1", messages.HEALTHY, messages.TopologyInfo([messages.NUMANode(1)])),
            messages.Device("GPU-2", messages.UNHEALTHY),
        ]
    )
    assert CODEC.decode(messages.ListAndWatchResponse, CODEC.encode(devices)) == devices
