"""Our .proto files, their committed descriptor sets and the dataclass codec."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.deviceplugin.messages import (
    CODEC,
    PROTO,
    SCHEMA,
    AllocateResponse,
    ContainerAllocateResponse,
    Mount,
)
from cdictk.deviceplugin.protocol import binpb_path, compile_proto
from tests import REPO

PROTOS = [Path(PROTO), REPO / "tests" / "e2e" / "kubelet" / "cri.proto"]


@pytest.mark.parametrize("proto", PROTOS, ids=lambda p: p.name)
def test_the_committed_descriptor_set_is_the_proto_compiled(proto: Path) -> None:
    """After editing a .proto: python -m cdictk.deviceplugin.protocol --compile PROTO."""
    assert Path(binpb_path(str(proto))).read_bytes() == compile_proto(str(proto))


def test_the_paths_on_the_wire_are_the_published_ones() -> None:
    assert SCHEMA.method_path("Registration", "Register") == "/v1beta1.Registration/Register"
    assert SCHEMA.method_path("DevicePlugin", "ListAndWatch") == "/v1beta1.DevicePlugin/ListAndWatch"
    numbers = {f.name: f.number for f in SCHEMA.descriptor("ContainerAllocateResponse").fields}
    assert numbers == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}


def test_codec_round_trips_maps_repeated_and_nested_messages() -> None:
    answer = AllocateResponse(
        [ContainerAllocateResponse(envs={"A": "1"}, mounts=[Mount("/c", "/h", True)], annotations={"k": "v"})]
    )
    assert CODEC.decode(AllocateResponse, CODEC.encode(answer)) == answer
