"""Allocate's answer for one container: CDI names in the CRI field and as one annotation, the
volume-mount strategy, replicas, and the refusals (unknown devices, names no spec defines, more than
one shared device)."""

from __future__ import annotations

import re

import pytest

from cdictk.deviceplugin.allocation import AllocationError, allocate
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.proto.deviceplugin_pb2 import CDIDevice, Mount
from cdictk.deviceplugin.resources import PluginDevice, Resource

GPUS = Resource(
    "nvidia.com/gpu", tuple(PluginDevice(f"GPU-{n}", f"GPU-{n}", n, f"GPU-{n}") for n in range(3))
)
SHARED = Resource(
    "nvidia.com/gpu",
    tuple(PluginDevice(f"GPU-{n}::{r}", f"GPU-{n}", n, f"GPU-{n}") for n in range(2) for r in range(2)),
    replicas=2,
)


def test_the_default_answers_the_names_in_the_field_and_one_annotation() -> None:
    got = allocate(GPUS, ["GPU-2", "GPU-0"], Settings(), response_id=lambda: "r1")
    names = ["nvidia.com/gpu=GPU-2", "nvidia.com/gpu=GPU-0"]
    assert got.cdi_devices == [CDIDevice(name=name) for name in names]
    assert got.annotations == {"cdi.k8s.io/cdictk-device-plugin_r1": ",".join(names)}
    assert got.envs == {} and got.mounts == [] and got.devices == []


def test_each_strategy_alone() -> None:
    field = allocate(GPUS, ["GPU-1"], Settings(list_strategies=("cdi-cri",)))
    assert field.cdi_devices == [CDIDevice(name="nvidia.com/gpu=GPU-1")] and field.annotations == {}
    annotations = allocate(
        GPUS, ["GPU-1"], Settings(list_strategies=("cdi-annotations",)), response_id=lambda: "x"
    )
    assert annotations.cdi_devices == [] and annotations.annotations == {
        "cdi.k8s.io/cdictk-device-plugin_x": "nvidia.com/gpu=GPU-1"
    }
    mounts = allocate(GPUS, ["GPU-1", "GPU-2"], Settings(list_strategies=("volume-mounts",)))
    assert mounts.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert mounts.mounts == [
        Mount(
            container_path="/var/run/nvidia-container-devices/GPU-1", host_path="/dev/null", read_only=True
        ),
        Mount(
            container_path="/var/run/nvidia-container-devices/GPU-2", host_path="/dev/null", read_only=True
        ),
    ]
    assert mounts.cdi_devices == [] and mounts.annotations == {}


def test_a_new_annotation_key_for_every_answer() -> None:
    first = allocate(GPUS, ["GPU-0"], Settings())
    second = allocate(GPUS, ["GPU-0"], Settings())
    assert first.annotations.keys() != second.annotations.keys()


def test_the_kind_and_the_annotation_prefix_are_the_settings() -> None:
    settings = Settings(cdi_kind="example.com/gpu", cdi_annotation_prefix="cdi.example.com/")
    got = allocate(GPUS, ["GPU-0"], settings, response_id=lambda: "r")
    assert got.cdi_devices == [CDIDevice(name="example.com/gpu=GPU-0")]
    assert got.annotations == {"cdi.example.com/cdictk-device-plugin_r": "example.com/gpu=GPU-0"}


def test_replicas_are_answered_as_their_gpu_once() -> None:
    got = allocate(SHARED, ["GPU-1::0", "GPU-1::1", "GPU-0::1"], Settings(list_strategies=("cdi-cri",)))
    assert got.cdi_devices == [CDIDevice(name="nvidia.com/gpu=GPU-1"), CDIDevice(name="nvidia.com/gpu=GPU-0")]


def test_fail_requests_greater_than_one() -> None:
    settings = Settings(fail_requests_greater_than_one=True)
    assert allocate(SHARED, ["GPU-0::0"], settings).cdi_devices
    with pytest.raises(
        AllocationError,
        match=re.escape("is shared (failRequestsGreaterThanOne): at most 1 per container, not 2"),
    ):
        allocate(SHARED, ["GPU-0::0", "GPU-1::0"], settings)


@pytest.mark.parametrize(
    ("ids", "said"),
    [
        ([], "no devices of nvidia.com/gpu asked for"),
        (["GPU-0", "GPU-9", "x"], "nvidia.com/gpu has no device GPU-9, x"),
    ],
)
def test_unknown_or_no_devices_are_refused(ids: list[str], said: str) -> None:
    with pytest.raises(AllocationError, match=re.escape(said)):
        allocate(GPUS, ids, Settings())


def test_names_no_spec_defines_are_refused_in_one_line() -> None:
    asked: list[list[str]] = []

    def unresolved(names: list[str]) -> list[str]:
        asked.append(names)
        return [name for name in names if name.endswith("GPU-2")]

    assert allocate(GPUS, ["GPU-0"], Settings(), unresolved).cdi_devices
    with pytest.raises(AllocationError) as refused:
        allocate(GPUS, ["GPU-0", "GPU-2"], Settings(), unresolved)
    assert "no CDI spec defines nvidia.com/gpu=GPU-2 (is the node's spec written?" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert asked == [["nvidia.com/gpu=GPU-0"], ["nvidia.com/gpu=GPU-0", "nvidia.com/gpu=GPU-2"]]
