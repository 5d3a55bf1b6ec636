from __future__ import annotations

from cdictk.node.gpus import Gpu, MigDevice, gpus_from_procfs, mig_profile, sysfs_bus_id
from cdictk.node.procfs import ProcGpu
from cdictk.nvcdi.naming import Strategy, gpu_names, mig_names
from cdictk.sorting import natural_key


def test_sysfs_bus_id() -> None:
    assert sysfs_bus_id("00000000:18:00.0") == "0000:18:00.0"
    assert sysfs_bus_id("00000001:AB:00.0") == "0001:ab:00.0"


def test_mig_profile_from_name_else_attributes() -> None:
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1, 1, 9856) == "1g.10gb"
    assert mig_profile("NVIDIA A100 MIG 1c.2g.10gb", 2, 1, 9856) == "1c.2g.10gb"
    assert mig_profile("odd name", 3, 3, 40192) == "3g.40gb"
    assert mig_profile("odd name", 2, 1, 4864) == "1c.2g.5gb"


def test_procfs_gpus_are_numbered_in_bus_order() -> None:
    gpus = gpus_from_procfs(
        [ProcGpu("B", "GPU-b", "0000:9a:00.0", 0), ProcGpu("A", "GPU-a", "0000:18:00.0", 1)]
    )
    assert [(gpu.index, gpu.minor, gpu.uuid) for gpu in gpus] == [(0, 1, "GPU-a"), (1, 0, "GPU-b")]


def test_names() -> None:
    gpu = Gpu(index=2, minor=5, uuid="GPU-x", bus_id="0000:18:00.0", name="H100")
    mig = MigDevice(parent_index=0, index=1, gi=7, ci=0, uuid="MIG-y", profile="1g.10gb")
    every = (Strategy.INDEX, Strategy.UUID, Strategy.TYPE_INDEX)
    assert gpu_names(gpu, every) == ["2", "GPU-x", "gpu2"]
    assert mig_names(mig, every) == ["0:1", "MIG-y", "mig0:1"]
    assert gpu_names(gpu, (Strategy.INDEX, Strategy.INDEX)) == ["2"]


def test_natural_order() -> None:
    names = ["gpu10", "gpu2", "0:10", "0:2", "1", "10", "GPU-a"]
    assert sorted(names, key=natural_key) == ["0:2", "0:10", "1", "10", "GPU-a", "gpu2", "gpu10"]


def test_a_mig_device_spans_its_gpu_instance_unless_its_profile_counts_fewer_compute_slices() -> None:
    def mig(profile: str) -> MigDevice:
        return MigDevice(0, 0, 1, 0, "MIG-x", profile)

    assert mig("2g.20gb").whole_instance and mig("1g.10gb+me").whole_instance
    assert mig("2c.2g.20gb").whole_instance
    assert not mig("1c.2g.20gb").whole_instance and not mig("3c.7g.80gb").whole_instance
