"""The fake NVML answers pynvml's real calls the way a driver would, from its config file."""

from __future__ import annotations

import ctypes
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.fakenode.nvml import CONFIG_NAME, FakeGpu, FakeMig, FakeNvmlConfig, build_fake_nvml

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the fake NVML")

VERSION = "580.95.05"
H100 = "NVIDIA H100 80GB HBM3"


def config(**changes: Any) -> FakeNvmlConfig:
    gpus = [
        FakeGpu(0, 0, "GPU-aaaaaaaa-0000", "00000000:18:00.0", H100, mig="enabled"),
        FakeGpu(1, 3, "GPU-bbbbbbbb-0001", "00000000:2A:00.0", H100),
        FakeGpu(2, 5, "GPU-cccccccc-0002", "00000000:3A:00.0", "Tesla V100-SXM2-16GB", mig="unsupported"),
    ]
    migs = [
        FakeMig(0, 0, 2, 0, "MIG-11111111-0000", f"{H100} MIG 3g.40gb", 3, 3, 40192, sms=60),
        FakeMig(0, 2, 9, 0, "MIG-22222222-0002", f"{H100} MIG 1g.10gb", 1, 1, 9856),
    ]
    fields: dict[str, Any] = {"gpus": gpus, "migs": migs, **changes}
    return FakeNvmlConfig(VERSION, 13000, **fields)


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@pytest.fixture
def lib(tmp_path: Path) -> Iterator[str]:
    """The fake library loaded into pynvml, as cdictk.node.nvml does; pynvml is reset afterwards."""
    path = build_fake_nvml(str(tmp_path), VERSION, cache_dir=str(tmp_path / "cache"))
    pynvml.nvmlLib = ctypes.CDLL(path)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield path
    while pynvml._nvmlLib_refcount > 0:
        pynvml.nvmlShutdown()
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


def test_gpus_are_reported_from_the_config(lib: str) -> None:
    config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == VERSION
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 13000
    assert pynvml.nvmlDeviceGetCount() == 3
    gpu0, gpu1, gpu2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    assert [pynvml.nvmlDeviceGetMinorNumber(h) for h in (gpu0, gpu1, gpu2)] == [0, 3, 5]
    assert pynvml.nvmlDeviceGetUUID(gpu1) == "GPU-bbbbbbbb-0001"
    assert pynvml.nvmlDeviceGetName(gpu2) == "Tesla V100-SXM2-16GB"
    pci = pynvml.nvmlDeviceGetPciInfo(gpu1)
    # pynvml returns the char arrays as bytes or, in newer releases, already decoded.
    assert [text(pci.busId), text(pci.busIdLegacy)] == ["00000000:2A:00.0", "0000:2A:00.0"]
    assert (pci.domain, pci.bus, pci.device, pci.pciDeviceId) == (0, 0x2A, 0, 0x233010DE)
    assert pynvml.nvmlDeviceGetMigMode(gpu0) == [1, 1]
    assert pynvml.nvmlDeviceGetMigMode(gpu1) == [0, 0]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(gpu2)
    assert [pynvml.nvmlDeviceGetMaxMigDeviceCount(h) for h in (gpu0, gpu1, gpu2)] == [7, 0, 0]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(3)


def test_mig_devices(lib: str) -> None:
    config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    gpu0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 2)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 7)
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert pynvml.nvmlDeviceIsMigDeviceHandle(gpu0).value == 0
    assert pynvml.nvmlDeviceGetUUID(mig) == "MIG-22222222-0002"
    assert pynvml.nvmlDeviceGetName(mig) == f"{H100} MIG 1g.10gb"
    assert (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (9, 0)
    attributes = pynvml.nvmlDeviceGetAttributes(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0))
    assert (attributes.gpuInstanceSliceCount, attributes.computeInstanceSliceCount) == (3, 3)
    assert (attributes.memorySizeMB, attributes.multiprocessorCount) == (40192, 60)
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(gpu0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMinorNumber(mig)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceId(gpu0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu0)


def test_init_failures(lib: str) -> None:
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded, match="Driver Not Loaded"):
        pynvml.nvmlInit()  # no config: like a host without the kernel module
    config(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED).write(os.path.dirname(lib))
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_events_can_be_unsupported(lib: str) -> None:
    config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    pynvml.nvmlEventSetFree(pynvml.nvmlEventSetCreate())
    pynvml.nvmlShutdown()
    config(events=False).write(os.path.dirname(lib))
    pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlEventSetCreate()
    assert "events supported=0" in config(events=False).render()


def test_config_is_read_again_at_the_next_init(lib: str) -> None:
    config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    stale = pynvml.nvmlDeviceGetHandleByIndex(2)
    pynvml.nvmlShutdown()
    config(gpus=[FakeGpu(0, 0, "GPU-new", "0000:18:00.0", H100)], migs=[]).write(os.path.dirname(lib))
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)) == "GPU-new"
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetUUID(stale)


def test_malformed_config_fails_init_and_says_where(lib: str, capfd: pytest.CaptureFixture[str]) -> None:
    Path(os.path.dirname(lib), CONFIG_NAME).write_text(
        config().render() + 'gpu index=3 minor=9 uuid=GPU-x bus=00000000:18:00.0 name="unterminated\n'
    )
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()
    assert "fake-nvml.conf:7: unterminated quote for: name" in capfd.readouterr().err


def test_render_and_build_cache(tmp_path: Path) -> None:
    assert config(gpus=[], migs=[]).render() == "driver version=580.95.05 cuda=13000\n"
    assert 'name="NVIDIA H100 80GB HBM3" mig=enabled maxmig=7' in config().render()
    with pytest.raises(ValueError, match="cannot write"):
        config(gpus=[FakeGpu(0, 0, 'GPU-"', "00000000:18:00.0", H100)]).render()
    first = build_fake_nvml(str(tmp_path / "a"), VERSION, cache_dir=str(tmp_path / "cache"))
    second = build_fake_nvml(str(tmp_path / "b"), VERSION, cache_dir=str(tmp_path / "cache"))
    uncached = build_fake_nvml(str(tmp_path / "c"), VERSION)
    assert os.path.basename(first) == f"libnvidia-ml.so.{VERSION}"
    assert Path(first).read_bytes() == Path(second).read_bytes() == Path(uncached).read_bytes()
    assert os.stat(second).st_mode & 0o777 == 0o755


def test_handles_by_uuid_and_indices(lib: str) -> None:
    """The two calls only NVIDIA's generator makes (bench/compare_generate.py runs it on the nodes)."""
    config().write(os.path.dirname(lib))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-bbbbbbbb-0001")
    pynvml.nvmlInit()
    gpu1 = pynvml.nvmlDeviceGetHandleByUUID("GPU-bbbbbbbb-0001")
    assert pynvml.nvmlDeviceGetMinorNumber(gpu1) == 3
    assert [pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(3)] == [0, 1, 2]
    mig = pynvml.nvmlDeviceGetHandleByUUID("MIG-22222222-0002")
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == 9
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetIndex(mig)  # not guessed: see fake_nvml.c
    for unknown in ("GPU-bbbbbbbb", "GPU-bbbbbbbb-00011", "MIG-11111111-0001", ""):
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetHandleByUUID(unknown)
    pynvml.nvmlShutdown()
    config(gpus=[FakeGpu(0, 0, "GPU-lost", "0000:18:00.0", H100, lost=True)], migs=[]).write(
        os.path.dirname(lib)
    )
    pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-lost")


# ---- the MIG calls nvidia-ctk's generator makes (go-nvlib's MigDevice.GetProfile) ----

MIB = 1024 * 1024


def mig_config() -> FakeNvmlConfig:
    """GPU 0 with a GPU instance of each kind the fake tells apart: a whole one, one cut into two compute
    instances, the media-extension and the double-memory one-slice profiles; GPU 1 a graphics one."""
    migs = [
        FakeMig(0, 0, 2, 0, "MIG-a0", f"{H100} MIG 3g.40gb", 3, 3, 40192, sms=60),
        FakeMig(0, 1, 5, 0, "MIG-a1", f"{H100} MIG 1c.2g.20gb", 2, 1, 19968, sms=16),
        FakeMig(0, 2, 5, 1, "MIG-a2", f"{H100} MIG 1c.2g.20gb", 2, 1, 19968, sms=16),
        FakeMig(0, 3, 13, 0, "MIG-a3", f"{H100} MIG 1g.10gb+me", 1, 1, 9856),
        FakeMig(0, 4, 11, 0, "MIG-a4", f"{H100} MIG 1g.20gb", 1, 1, 19968),
        FakeMig(1, 0, 3, 0, "MIG-b0", "NVIDIA RTX PRO 6000 MIG 1g.24gb+gfx", 1, 1, 24320),
    ]
    gpus = [
        FakeGpu(0, 0, "GPU-aaaaaaaa-0000", "00000000:18:00.0", H100, mig="enabled"),
        FakeGpu(
            1,
            1,
            "GPU-bbbbbbbb-0001",
            "00000000:2A:00.0",
            "NVIDIA RTX PRO 6000",
            mig="enabled",
            max_mig=4,
            memory_mb=97887,
        ),
        FakeGpu(2, 2, "GPU-cccccccc-0002", "00000000:3A:00.0", H100),
    ]
    return FakeNvmlConfig(VERSION, 13000, gpus, migs)


class GpuInstanceProfileInfoV3(ctypes.Structure):
    """nvml.h's nvmlGpuInstanceProfileInfo_v3_t, which pynvml does not define."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * 96),
        ("capabilities", ctypes.c_uint),
    ]


class ComputeInstanceProfileInfoV3(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint),
        ("sharedEncoderCount", ctypes.c_uint),
        ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint),
        ("name", ctypes.c_char * 96),
        ("capabilities", ctypes.c_uint),
    ]


def struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """nvml.h's NVML_STRUCT_VERSION."""
    return ctypes.sizeof(struct) | version << 24


def call(name: str, *args: Any) -> int:
    """An NVML function's return code, for the arguments pynvml would not pass."""
    result: int = pynvml._nvmlGetFunctionPointer(name)(*args)
    return result


def test_memory_info(lib: str) -> None:
    mig_config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    memory = pynvml.nvmlDeviceGetMemoryInfo(gpu0)
    assert (memory.total, memory.free, memory.used) == (81559 * MIB, 81559 * MIB, 0)  # an H100's, all free
    assert pynvml.nvmlDeviceGetMemoryInfo(gpu1).total == 97887 * MIB
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 19968 * MIB  # its GPU instance's
    assert call("nvmlDeviceGetMemoryInfo", gpu0, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetMemoryInfo(gpu0)


def test_gpu_and_compute_instances(lib: str) -> None:
    mig_config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    gpu0, gpu1, gpu2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    gi = pynvml.nvmlDeviceGetGpuInstanceById(gpu0, 5)
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    assert pynvml.nvmlDeviceGetUUID(info.device) == "GPU-aaaaaaaa-0000"
    # 2g.20gb is profile 14 on an H100; laid out after GI 2's four memory slices, in two of its own.
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (5, 14, 4, 2)
    first = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(gpu0, 2))
    assert (first.profileId, first.placement.start, first.placement.size) == (9, 0, 4)
    # The same GPU instance, the same handle.
    assert ctypes.addressof(gi.contents) == ctypes.addressof(
        pynvml.nvmlDeviceGetGpuInstanceById(gpu0, 5).contents
    )

    for ci_id, start in ((0, 0), (1, 1)):
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
        ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
        assert pynvml.nvmlDeviceGetUUID(ci_info.device) == "GPU-aaaaaaaa-0000"
        assert ctypes.addressof(ci_info.gpuInstance.contents) == ctypes.addressof(gi.contents)
        assert (ci_info.id, ci_info.profileId, ci_info.placement.start, ci_info.placement.size) == (
            ci_id,
            0,
            start,
            1,
        )
        # go-nvml calls the first version, which takes the same struct, where the library lacks _v2.
        v1 = pynvml.c_nvmlComputeInstanceInfo_t()
        assert call("nvmlComputeInstanceGetInfo", ci, ctypes.byref(v1)) == pynvml.NVML_SUCCESS
        assert bytes(v1) == bytes(ci_info)

    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 2)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(gpu0, 3)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceById(gpu2, 5)  # MIG mode off
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceById(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0), 2)
    assert pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(gpu1, 3)).profileId == 0x2A
    # Handles are not interchangeable: a GPU instance is no device, a device no GPU instance.
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetUUID(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetInfo(gpu0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlComputeInstanceGetInfo(gi)
    assert call("nvmlGpuInstanceGetInfo", gi, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlGpuInstanceGetInfo(gi)


def test_gpu_instance_profiles(lib: str) -> None:
    mig_config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    gpu0, gpu1, gpu2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    found = {}
    for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            found[profile] = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0, profile)  # v2, pynvml's default
        except pynvml.NVMLError_NotSupported:
            continue
    # Those of its MIG devices: 3g, 2g, 1g+me and the double-memory 1g, with an H100's profile IDs.
    rows = {
        profile: (info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount, info.memorySizeMB)
        for profile, info in found.items()
    }
    assert rows == {
        pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, 3, 2, 60, 40192),
        pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (14, 2, 3, 32, 19968),  # the 1c MIG device's SMs, twice
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (20, 1, 1, 14, 9856),
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (15, 1, 4, 14, 19968),
    }
    names = {profile: text(info.name) for profile, info in found.items()}
    assert names[pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE] == "MIG 2g.20gb"
    assert names[pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1] == "MIG 1g.10gb+me"
    assert all(info.version == pynvml.nvmlGpuInstanceProfileInfo_v2 for info in found.values())
    # Past the last profile: INVALID_ARGUMENT, how callers find the end.
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu2, 0)  # MIG mode off

    v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, version=1)
    assert (v1.id, v1.sliceCount, v1.instanceCount, v1.memorySizeMB) == (9, 3, 2, 40192)
    v3 = GpuInstanceProfileInfoV3(version=struct_version(GpuInstanceProfileInfoV3, 3))
    assert call("nvmlDeviceGetGpuInstanceProfileInfoV", gpu1, 0xA, ctypes.byref(v3)) == pynvml.NVML_SUCCESS
    assert (v3.id, v3.sliceCount, v3.instanceCount, v3.name, v3.capabilities) == (
        0x2A,
        1,
        4,
        b"MIG 1g.24gb+gfx",
        2,
    )
    assert v3.version == 0x03000098  # nvml.h's nvmlGpuInstanceProfileInfo_v3
    for version in (0, 0x01000098, struct_version(GpuInstanceProfileInfoV3, 1)):
        v3.version = version
        assert (
            call("nvmlDeviceGetGpuInstanceProfileInfoV", gpu1, 0xA, ctypes.byref(v3)) == 2
        )  # INVALID_ARGUMENT


def test_a_gpu_instance_profile_has_its_mig_devices_engines(lib: str) -> None:
    migs = [
        FakeMig(0, 0, 2, 0, "MIG-a0", f"{H100} MIG 3g.40gb", 3, 3, 40192, sms=60, engines=(3, 3, 1, 3, 1))
    ]
    FakeNvmlConfig(VERSION, 13000, config().gpus[:1], migs).write(os.path.dirname(lib))
    pynvml.nvmlInit()
    gpu0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    for version in (1, 2):
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
            gpu0, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, version
        )
        engines = (info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount)
        assert engines == (3, 3, 1, 3, 1)


@pytest.mark.parametrize(
    ("arch", "arch_id", "answer"),
    [
        ("9.0", None, pynvml.NVML_DEVICE_ARCH_HOPPER),
        ("8.0", None, pynvml.NVML_DEVICE_ARCH_AMPERE),
        ("8.6", None, pynvml.NVML_DEVICE_ARCH_AMPERE),
        ("8.9", None, pynvml.NVML_DEVICE_ARCH_ADA),
        ("7.0", None, pynvml.NVML_DEVICE_ARCH_VOLTA),
        ("7.5", None, pynvml.NVML_DEVICE_ARCH_TURING),
        ("12.0", None, pynvml.NVML_DEVICE_ARCH_BLACKWELL),
        ("99.0", None, pynvml.NVML_DEVICE_ARCH_UNKNOWN),
        ("9.0", 77, 77),  # told: any number, as NVML adds architectures
    ],
)
def test_the_architecture_is_the_compute_capabilitys_unless_told(
    lib: str, arch: str, arch_id: int | None, answer: int
) -> None:
    gpu = FakeGpu(0, 0, "GPU-aaaaaaaa-0000", "00000000:18:00.0", H100, arch=arch, arch_id=arch_id)
    FakeNvmlConfig(VERSION, 13000, [gpu], []).write(os.path.dirname(lib))
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetArchitecture(pynvml.nvmlDeviceGetHandleByIndex(0)) == answer


def test_compute_instance_profiles(lib: str) -> None:
    mig_config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    gi = pynvml.nvmlDeviceGetGpuInstanceById(gpu0, 5)
    engine = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, engine
    )
    assert (info.version, info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount) == (
        pynvml.nvmlComputeInstanceProfileInfo_v2,
        0,
        1,
        2,
        16,
    )
    assert text(info.name) == "MIG 1c.2g.20gb"
    # Only the profiles its compute instances use.
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, engine
        )
    for profile, engine_profile in ((pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT, engine), (0, 1)):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profile, engine_profile)
    whole = pynvml.nvmlDeviceGetGpuInstanceById(gpu0, 2)
    v1 = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(whole, 2, engine, version=1)
    assert (v1.id, v1.sliceCount, v1.instanceCount, v1.multiprocessorCount) == (2, 3, 1, 60)
    gfx = pynvml.nvmlDeviceGetGpuInstanceById(gpu1, 3)
    v3 = ComputeInstanceProfileInfoV3(version=struct_version(ComputeInstanceProfileInfoV3, 3))
    assert (
        call("nvmlGpuInstanceGetComputeInstanceProfileInfoV", gfx, 0, 0, ctypes.byref(v3))
        == pynvml.NVML_SUCCESS
    )
    assert (v3.version, v3.id, v3.name, v3.capabilities) == (0x0300008C, 0, b"MIG 1g.24gb+gfx", 1)
    v3.version = pynvml.nvmlGpuInstanceProfileInfo_v2  # another struct's version
    assert call("nvmlGpuInstanceGetComputeInstanceProfileInfoV", gfx, 0, 0, ctypes.byref(v3)) == 2
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gpu0, 0, engine)  # a device, not a GPU instance


def go_nvlib_profile(mig: Any) -> str:
    """What nvidia-ctk's go-nvlib makes of a MIG device (MigDevice.GetProfile, NewMigProfile): its GPU and
    compute instance's profile IDs looked up among the parent's profiles, the memory in GB from the
    parent's total."""
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(parent, pynvml.nvmlDeviceGetGpuInstanceId(mig))
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, pynvml.nvmlDeviceGetComputeInstanceId(mig))
    gi_info, ci_info = pynvml.nvmlGpuInstanceGetInfo(gi), pynvml.nvmlComputeInstanceGetInfo(ci)
    (gi_profile,) = [
        p
        for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
        if _supported(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, parent, p, version=1) == gi_info.profileId
    ]
    (ci_profile,) = [
        p
        for p in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        if _supported(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, p, 0, version=1)
        == ci_info.profileId
    ]
    g = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 7: 1, 9: 1, 0xA: 1, 0xD: 1}[gi_profile]
    c = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}[ci_profile]
    suffix = {7: "+me", 0xA: "+gfx", 0xD: "-me"}.get(gi_profile, "")
    total = pynvml.nvmlDeviceGetMemoryInfo(parent).total
    fraction = math.ceil(pynvml.nvmlDeviceGetAttributes(mig).memorySizeMB * MIB / total * 8) / 8
    gb = round(fraction * ((total + 1024 * MIB - 1) // (1024 * MIB)))
    return (f"{g}g" if c == g else f"{c}c.{g}g") + f".{gb}gb{suffix}"


def _supported(function: Any, *args: Any, **kwargs: Any) -> int | None:
    try:
        profile_id: int = function(*args, **kwargs).id
    except pynvml.NVMLError_NotSupported:
        return None
    return profile_id


def test_nvidias_profile_of_each_mig_device_is_the_one_its_name_ends_in(lib: str) -> None:
    """The instance calls agree with the device calls: nvidia-ctk names every MIG device's profile as NVML
    does at the end of its name (which cdictk reads)."""
    mig_config().write(os.path.dirname(lib))
    pynvml.nvmlInit()
    seen = []
    for index in range(2):
        gpu = pynvml.nvmlDeviceGetHandleByIndex(index)
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
            except pynvml.NVMLError_NotFound:
                continue
            name = pynvml.nvmlDeviceGetName(mig)
            seen.append(go_nvlib_profile(mig))
            assert name.endswith(f" MIG {seen[-1]}")
    assert len(seen) == 6


@pytest.mark.parametrize(
    ("mig", "error"),
    [
        (FakeMig(0, 0, 2, 0, "MIG-x", H100, 3, 3, 40192), "mig name must end in MIG and a profile"),
        (
            FakeMig(0, 0, 2, 0, "MIG-x", f"{H100} MIG 3g.40gb", 2, 2, 40192),
            "disagrees with gislices or cislices",
        ),
        (
            FakeMig(0, 0, 2, 0, "MIG-x", f"{H100} MIG 1c.3g.40gb", 3, 3, 40192),
            "disagrees with gislices or cislices",
        ),
        (FakeMig(0, 0, 2, 0, "MIG-x", f"{H100} MIG 3g.40gb+me", 3, 3, 40192), "no GPU instance profile"),
        (FakeMig(0, 0, 2, 0, "MIG-x", f"{H100} MIG 5c.7g.80gb", 7, 5, 80000), "no compute instance profile"),
        (FakeMig(0, 0, 2, 0, "MIG-x", f"{H100} MIG 7g.80gb", 7, 7, 90000), "at most its gpu's"),
        (FakeMig(0, 0, 7, 0, "MIG-x", f"{H100} MIG 1g.10gb", 1, 1, 9856), "the same gi and ci"),
        (FakeMig(0, 0, 7, 1, "MIG-x", f"{H100} MIG 3g.40gb", 3, 3, 40192), "different profiles or memmb"),
    ],
)
def test_mig_records_must_agree_with_their_profile(
    lib: str, capfd: pytest.CaptureFixture[str], mig: FakeMig, error: str
) -> None:
    """The instance calls answer from the profile in a MIG device's name; a config where it disagrees with
    the record, or GPU instances disagree among themselves, fails to load."""
    ok = FakeMig(0, 1, 7, 0, "MIG-y", f"{H100} MIG 1g.10gb", 1, 1, 9856)
    config(migs=[mig, ok]).write(os.path.dirname(lib))
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()
    assert error in capfd.readouterr().err
