"""The node's DRA devices from discovery on the fake nodes (whole GPUs, MIG devices): NVIDIA's names,
every attribute and capacity, and what is left out with a warning."""

from __future__ import annotations

import dataclasses

import pytest

from cdictk.dra.nodedevices import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    DraDevice,
    NodeDevices,
    Version,
    mig_device_name,
    node_devices,
    semver,
)
from cdictk.node.facts import NodeFacts, discover
from cdictk.node.modes import Mode
from tests.conftest import NodeFactory, roots_of
from tests.fakenode.node import PRESETS, FakeNode, Preset, fake_gpu, pcie_root
from tests.fakenode.nvml import FakeMig

H100 = "NVIDIA H100 80GB HBM3"
H100_BYTES = 81559 << 20  # the fake H100's total memory, as NVML gives it
PARENT = "GPU-4b1d0c2e-7a3f-4c55-9e21-000000000000"


def facts_of(node: FakeNode) -> NodeFacts:
    return discover(roots_of(node), Mode.AUTO)


def devices_of(node: FakeNode) -> NodeDevices:
    return node_devices(facts_of(node))


def by_name(found: NodeDevices) -> dict[str, DraDevice]:
    return {device.name: device for device in found.devices}


def common(bus: str, root: str) -> dict[str, object]:
    """What every device of the fake H100 node has, beside its own type, UUIDs and profile."""
    return {
        "productName": H100,
        "brand": "Nvidia",
        "architecture": "Hopper",
        "cudaComputeCapability": Version("9.0.0"),
        "driverVersion": Version("580.95.5"),  # 580.95.05: semver has no leading zeros
        "cudaDriverVersion": Version("13.0.0"),
        PCI_BUS_ID: bus,
        PCIE_ROOT: root,
    }


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("580.126.20", "580.126.20"),
        ("535.54", "535.54.0"),
        ("580.95.05", "580.95.5"),
        ("13", "13.0.0"),
        ("", None),
        ("580.95.05.1", None),
        ("580.95-beta", None),
    ],
)
def test_versions_are_semver(text: str, version: str | None) -> None:
    assert semver(text) == version


@pytest.mark.parametrize(
    ("profile", "name"),
    [
        ("1g.10gb", "gpu-3-mig-1g10gb-19-4"),
        ("3g.40gb", "gpu-3-mig-3g40gb-19-4"),
        ("1g.10gb+me", "gpu-3-mig-1g10gb-me-19-4"),
        ("1g.20gb-me", "gpu-3-mig-1g20gb-me-19-4"),
    ],
)
def test_mig_names_are_nvidias(profile: str, name: str) -> None:
    assert mig_device_name(3, profile, 19, 4) == name


@pytest.mark.root
def test_a_whole_gpu_is_gpu_minor_with_every_attribute(make_node: NodeFactory) -> None:
    node = make_node("single")
    found = devices_of(node)
    assert found.warnings == ()
    (device,) = found.devices
    assert (device.name, device.type) == ("gpu-0", "gpu")
    assert dict(device.attributes) == {
        "type": "gpu",
        "uuid": PARENT,
        **common("0000:18:00.0", "pci0000:17"),  # no NUMA node: sysfs says -1
    }
    assert dict(device.capacity) == {"memory": H100_BYTES}


@pytest.mark.root
def test_the_name_is_the_minor_number_not_the_index(make_node: NodeFactory) -> None:
    gpu = dataclasses.replace(fake_gpu(0, 0x18), minor=5)
    (device,) = devices_of(make_node(Preset("minor", "580.95.05", (gpu,)))).devices
    assert device.name == "gpu-5"


@pytest.mark.root
def test_mig_devices_replace_their_gpu(make_node: NodeFactory) -> None:
    node = make_node("eight")
    assert pcie_root(node.preset.gpus[0]) == "pci0000:17"
    found = devices_of(node)
    assert found.warnings == ()
    names = [device.name for device in found.devices]
    # GPU 0 is in MIG mode: its three MIG devices stand for it (3g.40gb is profile 9 at memory slice 0,
    # the 1g.10gb profile 19 at slices 4 and 5); the others are whole GPUs. Sorted by name.
    assert names == [
        "gpu-0-mig-1g10gb-19-4",
        "gpu-0-mig-1g10gb-19-5",
        "gpu-0-mig-3g40gb-9-0",
        *(f"gpu-{minor}" for minor in range(1, 8)),
    ]
    devices = by_name(found)
    small = devices["gpu-0-mig-1g10gb-19-4"]
    assert small.type == "mig"
    assert dict(small.attributes) == {
        "type": "mig",
        "uuid": "MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000001",
        "parentUUID": PARENT,
        "profile": "1g.10gb",
        **common("0000:18:00.0", "pci0000:17"),
        NUMA_NODE: 0,
    }
    assert dict(small.capacity) == {
        "memory": 9856 << 20,  # the GPU instance profile's MiB
        "multiprocessors": 16,
        "copyEngines": 1,
        "decoders": 1,
        "encoders": 0,
        "jpegEngines": 1,
        "ofaEngines": 0,
        "memorySlice4": 1,
    }
    large = devices["gpu-0-mig-3g40gb-9-0"]
    assert large.attributes["profile"] == "3g.40gb"
    assert dict(large.capacity) == {
        "memory": 40192 << 20,
        "multiprocessors": 60,
        "copyEngines": 3,
        "decoders": 3,
        "encoders": 0,
        "jpegEngines": 3,
        "ofaEngines": 0,
        **{f"memorySlice{i}": 1 for i in range(4)},
    }
    last = devices["gpu-7"]
    assert dict(last.attributes) == {
        "type": "gpu",
        "uuid": "GPU-4b1d0c2e-7a3f-4c55-9e21-000000000007",
        **common("0000:db:00.0", "pci0000:da"),
        NUMA_NODE: 1,
    }


@pytest.mark.root
def test_brand_and_architecture_are_named_as_nvidias_driver_names_them(make_node: NodeFactory) -> None:
    gpus = (
        dataclasses.replace(fake_gpu(0, 0x18), name="NVIDIA A100-SXM4-40GB", arch="8.0", brand=2),
        dataclasses.replace(fake_gpu(1, 0x2A), name="NVIDIA L4", arch="8.9", brand=13),
        dataclasses.replace(fake_gpu(2, 0x3A), arch="12.0", brand=0, arch_id=0xFFFFFFFF),
    )
    devices = by_name(devices_of(make_node(Preset("models", "535.54", gpus))))
    assert [
        (d.attributes["brand"], d.attributes["architecture"], d.attributes["cudaComputeCapability"])
        for d in devices.values()
    ] == [
        ("Tesla", "Ampere", Version("8.0.0")),
        ("NvidiaRTX", "Ada Lovelace", Version("8.9.0")),
        ("Unknown", "Unknown", Version("12.0.0")),
    ]
    assert {d.attributes["driverVersion"] for d in devices.values()} == {Version("535.54.0")}


@pytest.mark.root
def test_what_nvml_does_not_say_is_left_out_with_a_warning(make_node: NodeFactory) -> None:
    gpu = dataclasses.replace(fake_gpu(0, 0x18), brand=99, arch_id=77)  # numbers no name is known for
    found = devices_of(make_node(Preset("unnamed", "580.95.05", (gpu,))))
    (device,) = found.devices
    assert "brand" not in device.attributes and "architecture" not in device.attributes
    assert found.warnings == (f"GPU 0 ({PARENT}): NVML gave no brand, architecture; left out",)


@pytest.mark.root
def test_a_mig_device_dra_cannot_name_is_not_published(make_node: NodeFactory) -> None:
    node = make_node("eight")
    facts = facts_of(node)
    gpu = facts.gpus[0]
    whole, shared, _ = gpu.migs
    # A compute instance smaller than its GPU instance (two would share one name), and a GPU instance
    # NVML would not describe (no permission).
    split = dataclasses.replace(shared, profile="1c.2g.20gb", ci_slices=1, gi_slices=2)
    hidden = dataclasses.replace(whole, instance=None)
    facts.gpus[0] = dataclasses.replace(gpu, migs=(hidden, split))
    found = node_devices(facts)
    assert [d.name for d in found.devices] == [f"gpu-{minor}" for minor in range(1, 8)]
    assert found.warnings == (
        f"MIG device 0:0 ({whole.uuid}): NVML would not describe its GPU instance; not published",
        f"MIG device 0:1 ({shared.uuid}): its compute instance (1c.2g.20gb) is smaller than its GPU "
        "instance, which DRA names as one device; not published",
    )


@pytest.mark.root
def test_a_gpu_without_its_device_node_is_not_published(make_node: NodeFactory) -> None:
    node = make_node(PRESETS["eight"])
    facts = facts_of(node)
    del facts.gpu_nodes[3]
    assert "gpu-3" not in by_name(node_devices(facts))


@pytest.mark.root
def test_driver_versions_nvml_cannot_give_are_left_out(make_node: NodeFactory) -> None:
    facts = dataclasses.replace(
        facts_of(make_node("single")), driver_version="580.95.05-custom", cuda_version=0
    )
    found = node_devices(facts)
    (device,) = found.devices
    assert "driverVersion" not in device.attributes and "cudaDriverVersion" not in device.attributes
    assert found.warnings == (
        "driver version '580.95.05-custom' is no version: no driverVersion attribute",
        "NVML gave no CUDA driver version: no cudaDriverVersion attribute",
    )


@pytest.mark.root
def test_a_gpu_instance_placed_further_on_names_its_start(make_node: NodeFactory) -> None:
    # The fake places GPU instances in slot order: a 1g.10gb alone in slot 0 sits at memory slice 0.
    mig = FakeMig(0, 0, 11, 0, "MIG-1", f"{H100} MIG 1g.10gb", 1, 1, 9856, 16, (1, 1, 0, 1, 0))
    preset = Preset("one-mig", "580.95.05", (fake_gpu(0, 0x18, mig="enabled"),), (mig,))
    (device,) = devices_of(make_node(preset)).devices
    assert device.name == "gpu-0-mig-1g10gb-19-0"
    assert device.capacity["memorySlice0"] == 1
