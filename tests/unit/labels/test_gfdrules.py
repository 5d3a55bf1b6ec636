"""GFD's label rules on node views built by hand: sanitising, families, the version split, the MIG
strategies (single's INVALID cases, mixed's per-profile sets), sharing, gpu.mode and vGPU."""

from __future__ import annotations

import pytest

from cdictk.labels.gfdrules import (
    LabelError,
    Sharing,
    family,
    gpu_mode,
    node_labels,
    sanitise,
    version_labels,
)
from cdictk.labels.nodeview import NodeView
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.node.pcidevices import VgpuHost

H100 = "NVIDIA H100 80GB HBM3"


def mig(parent: int, slot: int, profile: str = "1g.10gb", memory: int = 9856) -> MigDevice:
    slices = int(profile.split("g.", maxsplit=1)[0])
    return MigDevice(
        parent, slot, 7 + slot, 0, f"MIG-{parent}-{slot}", profile, memory, 16, slices, slices, 1, 1, 0, 1, 0
    )


def gpu(
    index: int, *, name: str = H100, migs: tuple[MigDevice, ...] | None = None, cc: tuple[int, int] = (9, 0)
) -> Gpu:
    return Gpu(
        index,
        index,
        f"GPU-{index}",
        f"0000:{index + 1:02x}:00.0",
        name,
        migs is not None,
        migs or (),
        mig_capable=True,
        memory_bytes=81559 << 20,
        compute_capability=cc,
    )


def view(*gpus: Gpu, classes: int | None = 0x030200, vgpus: tuple[VgpuHost, ...] | None = ()) -> NodeView:
    return NodeView(
        "580.95.05",
        12080,
        gpus,
        {g.bus_id: classes for g in gpus},
        vgpus,
        "Standard PC (Q35 + ICH9, 2009)",
    )


def test_sanitise_keeps_letters_digits_dash_underscore_dot_and_joins_words() -> None:
    assert sanitise("Standard PC (Q35 + ICH9, 2009)") == "Standard-PC-Q35-ICH9-2009"
    assert sanitise("  NVIDIA  A100-SXM4_40GB v1.0 ") == "NVIDIA-A100-SXM4_40GB-v1.0"
    assert sanitise("ÄÖ/\t") == ""


@pytest.mark.parametrize(
    ("cc", "expected"),
    [
        ((1, 3), "tesla"),
        ((3, 7), "kepler"),
        ((7, 0), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((13, 0), "rubin"),
        ((4, 0), "undefined"),
        ((11, 0), "undefined"),
    ],
)
def test_family_by_compute_capability(cc: tuple[int, int], expected: str) -> None:
    assert family(*cc) == expected


def test_versions_and_their_deprecated_duplicates() -> None:
    labels = version_labels("550.107.02", 12050)
    assert labels["nvidia.com/cuda.driver.rev"] == labels["nvidia.com/cuda.driver-version.revision"] == "02"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.5"
    assert labels["nvidia.com/cuda.runtime.minor"] == "5"
    two = version_labels("535.54", 0)
    assert two["nvidia.com/cuda.driver-version.revision"] == "" and "nvidia.com/cuda.runtime.major" not in two
    with pytest.raises(LabelError, match=r"X\.Y"):
        version_labels("550", 12050)


def test_whole_gpus_without_mig() -> None:
    labels = node_labels(view(gpu(0), gpu(1)), "none", Sharing())
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/gpu.machine"] == "Standard-PC-Q35-ICH9-2009"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/mps.capable"] == "false"
    assert labels["nvidia.com/vgpu.present"] == "false"
    assert "nvidia.com/mig.strategy" not in labels


def test_time_slicing_marks_the_product_shared_unless_renamed_by_default() -> None:
    sharing = Sharing({"nvidia.com/gpu": 4})
    labels = node_labels(view(gpu(0)), "none", sharing)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == (
        "4",
        "time-slicing",
    )
    renamed = node_labels(view(gpu(0)), "none", Sharing({"nvidia.com/gpu": 4}, rename_by_default=True))
    assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_gpus_in_mig_mode_count_but_carry_no_sharing_when_all_are() -> None:
    labels = node_labels(view(gpu(0, migs=(mig(0, 0),))), "none", Sharing({"nvidia.com/gpu": 4}))
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("1", "0")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_several_models_the_lowest_numbered_whole_gpu_wins() -> None:
    gpus = (gpu(0, name="NVIDIA A100-SXM4-40GB", cc=(8, 0)), gpu(1), gpu(2, name="Other", migs=()))
    labels = node_labels(view(*gpus), "none", Sharing())
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.family"]) == ("1", "ampere")


def test_single_with_one_profile_describes_the_mig_devices() -> None:
    gpus = (gpu(0, migs=(mig(0, 0), mig(0, 1))), gpu(1, migs=(mig(1, 0),)))
    labels = node_labels(view(*gpus), "single", Sharing({"nvidia.com/gpu": 2}))
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("3", "2")
    assert labels["nvidia.com/gpu.memory"] == "9856" and labels["nvidia.com/gpu.multiprocessors"] == "16"
    assert labels["nvidia.com/gpu.slices.gi"] == "1" and labels["nvidia.com/gpu.engines.jpeg"] == "1"
    assert labels["nvidia.com/gpu.family"] == "hopper"  # the whole GPUs' architecture stays


@pytest.mark.parametrize(
    "gpus",
    [
        (gpu(0, migs=(mig(0, 0),)), gpu(1)),  # one GPU not in MIG mode
        (gpu(0, migs=(mig(0, 0),)), gpu(1, migs=())),  # one in MIG mode without MIG devices
        (gpu(0, migs=(mig(0, 0), mig(0, 1, "3g.40gb", 40192))),),  # two profiles
    ],
)
def test_single_that_cannot_be_met_is_mig_invalid(gpus: tuple[Gpu, ...]) -> None:
    labels = node_labels(view(*gpus), "single", Sharing({"nvidia.com/gpu": 2}))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    for suffix, value in (("count", "0"), ("replicas", "0"), ("memory", "0"), ("sharing-strategy", "")):
        assert labels[f"nvidia.com/gpu.{suffix}"] == value


def test_single_without_mig_mode_is_as_none() -> None:
    labels = node_labels(view(gpu(0)), "single", Sharing())
    assert labels == {**node_labels(view(gpu(0)), "none", Sharing()), "nvidia.com/mig.strategy": "single"}


def test_mixed_a_set_per_profile_plus_dots() -> None:
    gpus = (gpu(0, migs=(mig(0, 0), mig(0, 1, "1g.10gb+me"), mig(0, 2))), gpu(1), gpu(2, migs=()))
    labels = node_labels(view(*gpus), "mixed", Sharing({"nvidia.com/mig-1g.10gb": 3}))
    assert labels["nvidia.com/mig-1g.10gb.count"] == "2"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert labels["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
    assert labels["nvidia.com/mig-1g.10gb.me.replicas"] == "1"
    assert labels["nvidia.com/gpu.count"] == "3"  # whole GPUs: the ones in MIG mode counted too


@pytest.mark.parametrize(
    ("classes", "mode"),
    [([0x030200], "compute"), ([0x030000, 0x030000], "graphics"), ([0x030200, 0x030000], "unknown")],
)
def test_gpu_mode(classes: list[int], mode: str) -> None:
    assert gpu_mode(classes) == mode
    assert gpu_mode([None]) == gpu_mode([0x028000]) == "unknown"


def test_vgpu_labels_and_an_unreadable_scan() -> None:
    host = VgpuHost("0000:01:00.0", "550.54.16", "r550_40")
    labels = node_labels(view(gpu(0), vgpus=(host,)), "none", Sharing())
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert labels["nvidia.com/vgpu.host-driver-branch"] == "r550_40"
    assert "nvidia.com/vgpu.present" not in node_labels(view(gpu(0), vgpus=None), "none", Sharing())


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(LabelError, match="unknown MIG strategy"):
        node_labels(view(gpu(0)), "all", Sharing())
