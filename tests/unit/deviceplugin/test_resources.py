"""The node's GPUs as extended resources: MIG strategies, NUMA nodes, replicas, and the devices of lost
GPUs kept across a discovery, on made-up discovery results."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdictk.deviceplugin.pluginsettings import Replicas, Settings
from cdictk.deviceplugin.resources import (
    PluginDevice,
    Resource,
    ResourceError,
    build,
    keep_missing,
    numa_reader,
    underlying,
)
from cdictk.node.gpus import Gpu, MigDevice


def gpu(index: int, *, migs: tuple[str, ...] | None = None) -> Gpu:
    uuid = f"GPU-{index}"
    devices = tuple(
        MigDevice(index, n, n + 1, 0, f"MIG-{index}-{n}", profile) for n, profile in enumerate(migs or ())
    )
    return Gpu(index, index, uuid, f"0000:{index:02x}:00.0", "H100", migs is not None, devices)


def numa(bus: str) -> int | None:
    return int(bus[5:7], 16) // 2  # two GPUs per NUMA node


def resources(gpus: list[Gpu], **settings: object) -> dict[str, list[str]]:
    warned: list[str] = []
    found = build(gpus, Settings(**settings), numa, warned.append)  # type: ignore[arg-type]
    return {resource.name: [device.id for device in resource.devices] for resource in found}


def test_none_offers_whole_gpus_and_warns_of_those_in_mig_mode() -> None:
    warned: list[str] = []
    found = build([gpu(0, migs=("1g.10gb",)), gpu(1), gpu(2)], Settings(), numa, warned.append)
    assert [(r.name, [d.id for d in r.devices]) for r in found] == [("nvidia.com/gpu", ["GPU-1", "GPU-2"])]
    assert [d.numa for d in found[0].devices] == [0, 1]
    assert found[0].socket == "cdictk-nvidia.com_gpu.sock"
    assert len(warned) == 1 and "GPU 0 (GPU-0) is in MIG mode and left out" in warned[0]


def test_single_offers_mig_devices_as_gpus() -> None:
    gpus = [gpu(0, migs=("1g.10gb", "1g.10gb")), gpu(1, migs=("1g.10gb",))]
    assert resources(gpus, mig_strategy="single") == {"nvidia.com/gpu": ["MIG-0-0", "MIG-0-1", "MIG-1-0"]}
    assert resources([gpu(0), gpu(1)], mig_strategy="single") == {"nvidia.com/gpu": ["GPU-0", "GPU-1"]}


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        ([gpu(0, migs=("1g.10gb",)), gpu(1)], "single needs every GPU in MIG mode or none: GPUs 1 are not"),
        ([gpu(0, migs=("1g.10gb",)), gpu(1, migs=())], "single: GPUs 1 are in MIG mode without MIG devices"),
        (
            [gpu(0, migs=("1g.10gb", "3g.40gb"))],
            "single needs one MIG profile on the node, not 1g.10gb, 3g.40gb",
        ),
    ],
)
def test_single_refuses_what_it_cannot_offer_as_one_resource(gpus: list[Gpu], said: str) -> None:
    with pytest.raises(ResourceError, match=re.escape(said)):
        resources(gpus, mig_strategy="single")


def test_mixed_leaves_out_mig_devices_whose_compute_instance_is_smaller_than_their_gpu_instance() -> None:
    warned: list[str] = []
    gpus = [gpu(0, migs=("1c.2g.20gb", "1c.2g.20gb", "2g.20gb")), gpu(1)]
    found = build(gpus, Settings(mig_strategy="mixed"), numa, warned.append)
    assert {r.name: [d.id for d in r.devices] for r in found} == {
        "nvidia.com/gpu": ["GPU-1"],
        "nvidia.com/mig-2g.20gb": ["MIG-0-2"],
    }
    assert len(warned) == 2 and "MIG device 0:0 (MIG-0-0, 1c.2g.20gb) is left out" in warned[0]


def test_every_resource_has_a_socket_of_its_own() -> None:
    """A MIG profile's replicas renamed example.com/gpu beside nvidia.com/gpu: two resources named
    gpu, which must not share (and unlink each other's) socket."""
    gpus = [gpu(0, migs=("1g.10gb",)), gpu(1)]
    settings = Settings(
        mig_strategy="mixed", replicas=(Replicas("nvidia.com/mig-1g.10gb", 2, "example.com/gpu"),)
    )
    found = build(gpus, settings, numa, lambda line: None)
    assert {r.name: r.socket for r in found} == {
        "example.com/gpu": "cdictk-example.com_gpu.sock",
        "nvidia.com/gpu": "cdictk-nvidia.com_gpu.sock",
    }
    # the domain has no _, so the name after the first _ is the resource's own
    assert Resource("a.b/c", ()).socket != Resource("a/b.c", ()).socket


def test_mixed_offers_a_resource_per_profile() -> None:
    gpus = [gpu(0, migs=("1g.10gb", "1g.10gb+me", "3g.40gb")), gpu(1), gpu(2, migs=())]
    assert resources(gpus, mig_strategy="mixed") == {
        "nvidia.com/gpu": ["GPU-1"],
        "nvidia.com/mig-1g.10gb": ["MIG-0-0"],
        "nvidia.com/mig-1g.10gb.me": ["MIG-0-1"],
        "nvidia.com/mig-3g.40gb": ["MIG-0-2"],
    }


def test_a_resource_without_devices_is_not_offered() -> None:
    assert resources([gpu(0, migs=("1g.10gb",))], mig_strategy="mixed") == {
        "nvidia.com/mig-1g.10gb": ["MIG-0-0"]
    }


def test_replicas_name_each_device_n_times_under_their_name() -> None:
    rule = Replicas("nvidia.com/gpu", 2)
    assert resources([gpu(0), gpu(1)], replicas=(rule,)) == {
        "nvidia.com/gpu": ["GPU-0::0", "GPU-0::1", "GPU-1::0", "GPU-1::1"]
    }
    shared = resources([gpu(0)], replicas=(rule,), rename_by_default=True)
    assert shared == {"nvidia.com/gpu.shared": ["GPU-0::0", "GPU-0::1"]}
    renamed = resources([gpu(0)], replicas=(Replicas("nvidia.com/gpu", 3, "example.com/slice"),))
    assert renamed == {"example.com/slice": ["GPU-0::0", "GPU-0::1", "GPU-0::2"]}


def test_replicas_may_not_take_a_name_the_node_offers() -> None:
    rule = Replicas("nvidia.com/mig-1g.10gb", 2, "nvidia.com/gpu")
    with pytest.raises(
        ResourceError, match=re.escape("renamed nvidia.com/gpu, which the node offers already")
    ):
        resources([gpu(0, migs=("1g.10gb",)), gpu(1)], mig_strategy="mixed", replicas=(rule,))


def test_underlying_takes_replicas_off_once_each() -> None:
    assert underlying(["GPU-1::0", "GPU-1::1", "MIG-2", "GPU-0::3"]) == ["GPU-1", "MIG-2", "GPU-0"]


def test_numa_reader(tmp_path: Path) -> None:
    for bus, text in (("0000:01:00.0", "1\n"), ("0000:02:00.0", "-1\n"), ("0000:03:00.0", "x")):
        (tmp_path / "bus/pci/devices" / bus).mkdir(parents=True)
        (tmp_path / "bus/pci/devices" / bus / "numa_node").write_text(text)
    read = numa_reader(str(tmp_path))
    assert [read(f"0000:0{n}:00.0") for n in (1, 2, 3, 4)] == [1, None, None, None]


# ---- lost GPUs kept ------------------------------------------------------------------------------


def device(gpu_index: int, mig: int | None = None) -> PluginDevice:
    uuid = f"GPU-{gpu_index}"
    if mig is None:
        return PluginDevice(uuid, uuid, gpu_index, uuid)
    return PluginDevice(f"MIG-{gpu_index}-{mig}", f"MIG-{gpu_index}-{mig}", gpu_index, uuid, mig + 1, 0)


def test_a_gpu_discovery_misses_stays_in_its_resource_in_index_order() -> None:
    before = [Resource("nvidia.com/gpu", (device(0), device(1), device(2)))]
    now = [Resource("nvidia.com/gpu", (device(0), device(2)))]
    kept, missing = keep_missing(before, now, {"GPU-0", "GPU-2"})
    assert [[d.id for d in r.devices] for r in kept] == [["GPU-0", "GPU-1", "GPU-2"]]
    assert missing == {"GPU-1"}


def test_a_resource_of_lost_gpus_alone_is_kept_with_its_replicas() -> None:
    before = [
        Resource("nvidia.com/gpu", (device(1),)),
        Resource("nvidia.com/mig-1g.10gb", (device(0, 0), device(0, 1)), replicas=2),
    ]
    now = [Resource("nvidia.com/gpu", (device(1),))]
    kept, missing = keep_missing(before, now, {"GPU-1"})
    assert [r.name for r in kept] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    assert kept[1].replicas == 2 and [d.id for d in kept[1].devices] == ["MIG-0-0", "MIG-0-1"]
    assert missing == {"GPU-0"}


def test_devices_gone_from_a_gpu_discovery_found_are_dropped() -> None:
    # a MIG device destroyed (its GPU still there), a GPU now in MIG mode: what the node says now
    before = [
        Resource("nvidia.com/gpu", (device(1),)),
        Resource("nvidia.com/mig-1g.10gb", (device(0, 0), device(0, 1))),
    ]
    now = [Resource("nvidia.com/mig-1g.10gb", (device(0, 0), device(1, 0)))]
    kept, missing = keep_missing(before, now, {"GPU-0", "GPU-1"})
    assert [(r.name, [d.id for d in r.devices]) for r in kept] == [
        ("nvidia.com/mig-1g.10gb", ["MIG-0-0", "MIG-1-0"])
    ]
    assert missing == set()


def test_the_first_discovery_keeps_nothing() -> None:
    now = [Resource("nvidia.com/gpu", (device(0),))]
    assert keep_missing([], now, {"GPU-0"}) == (now, set())
