"""Health's findings as NVIDIA's device taints, the devices health watches, and each taint's time kept
while it stays."""

from __future__ import annotations

import pytest

from cdictk.dra.devicetaints import TaintBook, taint, watched
from cdictk.dra.nodedevices import DraDevice, Taint
from cdictk.node.gpuhealth import LOST, UNMONITORED, XID, Finding, Watched
from cdictk.node.gpus import Gpu, MigDevice

DRIVER = "gpu.nvidia.com"
GPU_1 = DraDevice("gpu-1", "gpu", {"type": "gpu", "uuid": "GPU-1"}, {"memory": 1 << 30})
MIG_A = DraDevice(
    "gpu-0-mig-1g10gb-19-0",
    "mig",
    {"type": "mig", "uuid": "MIG-A", "parentUUID": "GPU-0", "profile": "1g.10gb"},
    {"memory": 1 << 30},
)


class Clock:
    def __init__(self) -> None:
        self.second = 0

    def __call__(self) -> str:
        self.second += 1
        return f"2026-12-02T14:00:{self.second:02d}Z"


@pytest.mark.parametrize(
    ("finding", "expected"),
    [
        (Finding(XID, "Xid 79", 79), Taint("gpu.nvidia.com/xid", "NoSchedule", "79")),
        (Finding(LOST, "GPU is lost"), Taint("gpu.nvidia.com/gpu-lost", "NoSchedule")),
        (Finding(UNMONITORED, "the NVML watcher ended"), Taint("gpu.nvidia.com/unmonitored", "None")),
    ],
)
def test_each_finding_is_nvidias_taint(finding: Finding, expected: Taint) -> None:
    assert taint(finding, DRIVER) == expected


def test_the_keys_domain_is_the_driver_name() -> None:
    assert taint(Finding(XID, "Xid 48", 48), "gpu.example.com").key == "gpu.example.com/xid"


def test_a_finding_of_no_known_cause_has_no_taint() -> None:
    with pytest.raises(ValueError, match="no taint"):
        taint(Finding("ecc", "too hot"), DRIVER)


def test_health_watches_a_gpu_by_its_uuid_and_a_mig_device_with_its_instances() -> None:
    gpu = Gpu(
        index=0,
        minor=0,
        uuid="GPU-0",
        bus_id="0000:18:00.0",
        name="NVIDIA H100",
        mig_enabled=True,
        migs=(MigDevice(parent_index=0, index=0, gi=7, ci=0, uuid="MIG-A", profile="1g.10gb"),),
    )
    assert watched([GPU_1, MIG_A], [gpu]) == [Watched("GPU-1", "GPU-1"), Watched("MIG-A", "GPU-0", 7, 0)]


def test_a_taint_keeps_its_time_while_it_stays_and_gets_a_new_one_when_it_returns() -> None:
    book = TaintBook(DRIVER, Clock())
    assert book.apply([GPU_1, MIG_A], {}) == (GPU_1, MIG_A)  # healthy: as discovered
    xid = {"GPU-1": Finding(XID, "Xid 79", 79)}
    (first, mig) = book.apply([GPU_1, MIG_A], xid)
    assert first.taints == (Taint("gpu.nvidia.com/xid", "NoSchedule", "79", "2026-12-02T14:00:01Z"),)
    assert mig == MIG_A
    assert book.apply([GPU_1, MIG_A], xid)[0] == first  # unchanged: the same time
    # another Xid is another taint, of its own time
    (other, _) = book.apply([GPU_1, MIG_A], {"GPU-1": Finding(XID, "Xid 48", 48)})
    assert other.taints == (Taint("gpu.nvidia.com/xid", "NoSchedule", "48", "2026-12-02T14:00:02Z"),)
    assert book.apply([GPU_1, MIG_A], {})[0] == GPU_1  # recovered: untainted, forgotten
    (back, _) = book.apply([GPU_1, MIG_A], xid)
    assert back.taints[0].time_added == "2026-12-02T14:00:03Z"
