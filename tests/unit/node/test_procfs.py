from __future__ import annotations

from pathlib import Path

from cdictk.node import procfs
from cdictk.startpath.helpers.roots import Roots

DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
238 nvidia-uvm
241 nvidia-caps

Block devices:
  8 sd
238 not-a-char-device
"""


def test_parse_devices_takes_character_majors_only() -> None:
    majors = procfs.parse_devices(DEVICES)
    assert majors == {"mem": 1, "nvidia-frontend": 195, "nvidia-uvm": 238, "nvidia-caps": 241}


def test_parse_modules() -> None:
    text = "nvidia_uvm 1531904 0 - Live 0x0 (PO)\nnvidia 104071168 2 nvidia_uvm, Live 0x0 (PO)\n\n"
    assert procfs.parse_modules(text) == {"nvidia_uvm", "nvidia"}


def test_driver_version_from_proprietary_and_open_modules() -> None:
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    opened = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (x)  Tue\n"
    assert procfs.parse_driver_version(closed) == "550.54.15"
    assert procfs.parse_driver_version(opened) == "580.95.05"
    assert procfs.parse_driver_version("garbage") is None


def test_gpu_information() -> None:
    text = (
        "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-abc\nBus Location: \t 0000:1A:00.0\n"
        "Device Minor: \t 3\n"
    )
    gpu = procfs.parse_gpu_information(text)
    assert gpu == procfs.ProcGpu("NVIDIA H100 80GB HBM3", "GPU-abc", "0000:1a:00.0", 3)
    assert procfs.parse_gpu_information("Model: x\n") is None


def test_mig_minors() -> None:
    minors = procfs.parse_mig_minors(
        "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu1/gi2/ci1/access 157\nbad line here\n"
    )
    assert minors.config == 1 and minors.monitor == 2
    assert minors.access == {(0, 0, None): 3, (0, 0, 0): 4, (1, 2, 1): 157}


def test_readers_take_the_proc_root(tmp_path: Path) -> None:
    (tmp_path / "driver/nvidia/gpus/0000:18:00.0").mkdir(parents=True)
    (tmp_path / "driver/nvidia/gpus/0000:02:00.0").mkdir(parents=True)
    (tmp_path / "devices").write_text(DEVICES)
    (tmp_path / "modules").write_text("nvidia 1 0 - Live 0x0\next4 1 0 - Live 0x0\n")
    for bus, minor in (("0000:18:00.0", 0), ("0000:02:00.0", 1)):
        (tmp_path / f"driver/nvidia/gpus/{bus}/information").write_text(
            f"Model: M\nGPU UUID: GPU-{minor}\nBus Location: {bus}\nDevice Minor: {minor}\n"
        )
    roots = Roots(proc=str(tmp_path))
    assert procfs.read_char_majors(roots)["nvidia-caps"] == 241
    assert procfs.read_loaded_modules(roots) == {"nvidia"}
    assert [gpu.bus_id for gpu in procfs.read_proc_gpus(roots)] == ["0000:02:00.0", "0000:18:00.0"]
    assert procfs.read_driver_version(roots) is None
    assert procfs.read_mig_minors(roots) is None
    assert procfs.read_loaded_modules(Roots(proc=str(tmp_path / "none"))) is None


def test_mig_minors_for_some_gpus_only() -> None:
    text = "config 1\ngpu0/gi1/access 12\ngpu3/gi1/access 417\ngpu3/gi1/ci0/access 418\ngpux/gi1/access 9\n"
    minors = procfs.parse_mig_minors(text, {3})
    assert minors.access == {(3, 1, None): 417, (3, 1, 0): 418} and minors.config == 1
    assert procfs.parse_mig_minors("gpu0/gix/access 5\ngpu0/gi1/cix/access 6\ngpu0/gi1 7\n").access == {}


def test_numbers_the_kernel_cannot_have_are_ignored() -> None:
    from cdictk.node.procfs import parse_devices, parse_mig_minors

    text = "Character devices:\n\u00b2 odd\n99999999999 huge\n4096 toolarge\n195 nvidia-frontend\n"
    assert parse_devices(text) == {"nvidia-frontend": 195}
    minors = parse_mig_minors("gpu0/gi1/access 99999999999\ngpu0/gi2/access 12\nconfig \u00b2\n")
    assert minors.access == {(0, 2, None): 12} and minors.config is None


def test_gpu_instances_tell_a_gpu_in_mig_mode(tmp_path: Path) -> None:
    roots = Roots(driver="/", dev="/", proc=str(tmp_path), sys="/sys")
    mig = tmp_path / "driver/nvidia/capabilities/gpu3/mig"
    assert not procfs.has_gpu_instances(roots, 3)  # no capabilities at all
    (mig / "config").parent.mkdir(parents=True)
    (mig / "giX").mkdir()
    assert not procfs.has_gpu_instances(roots, 3)
    (mig / "gi7").mkdir()
    assert procfs.has_gpu_instances(roots, 3) and not procfs.has_gpu_instances(roots, 0)
