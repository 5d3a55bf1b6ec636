"""The fake NVML answers pynvml's real calls the way a driver would, from its config file."""

from __future__ import annotations

import ctypes
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
