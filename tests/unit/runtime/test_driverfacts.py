"""Driver and GPU facts for requirement checks, read anew from the fake NVML in the NVML runner's child
(the hook's slow path), and chosen for the keys and GPUs a start asks about."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from cdictk.node.libchoice import LibraryError
from cdictk.node.nvmllib import BRANDS, NvmlError
from cdictk.runtime.driverfacts import read_facts
from cdictk.startpath.prestart.factcache import NvmlFactsError, select
from cdictk.startpath.prestart.require import (
    Facts,
    GpuFacts,
    RequirementError,
    check,
    needed_keys,
    requirements,
)
from tests import REPO as CLONE
from tests.conftest import NodeFactory
from tests.fakenode.nvml import (
    NVML_BRAND_GEFORCE_RTX,
    NVML_BRAND_NVIDIA,
    NVML_BRAND_TESLA,
    FakeGpu,
    FakeMig,
    FakeNvmlConfig,
    build_fake_nvml,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the fake NVML")

REPO = str(CLONE)
VERSION = "580.95.05"
H100 = "NVIDIA H100 80GB HBM3"
ALL_KEYS = ("cuda", "driver", "arch", "brand")


def driver_facts(library: str, minors: list[int], keys: Collection[str]) -> Facts:
    """What a start with a cache miss checks its requirements against."""
    return select(read_facts(library), minors, keys) if keys else Facts()


def gpus() -> list[FakeGpu]:
    return [
        FakeGpu(0, 0, "GPU-aaaaaaaa-0000", "00000000:18:00.0", H100, mig="enabled"),  # 9.0, NVIDIA by default
        FakeGpu(1, 3, "GPU-bbbbbbbb-0001", "00000000:2A:00.0", "Tesla V100-SXM2-16GB", arch="7.0", brand=2),
        FakeGpu(
            2, 5, "GPU-cccccccc-0002", "00000000:3A:00.0", "NVIDIA GeForce RTX 3090", arch="8.6", brand=15
        ),
        FakeGpu(3, 6, "GPU-dddddddd-0003", "00000000:5D:00.0", "NVIDIA B200", arch="10.0", brand=17),
    ]


def config(**changes: Any) -> FakeNvmlConfig:
    fields: dict[str, Any] = {
        "driver_version": VERSION,
        "cuda_version": 13000,
        "gpus": gpus(),
        "migs": [FakeMig(0, 0, 2, 0, "MIG-11111111-0000", f"{H100} MIG 3g.40gb", 3, 3, 40192)],
        **changes,
    }
    return FakeNvmlConfig(**fields)


@pytest.fixture
def lib(tmp_path: Path, stub_cache: str) -> str:
    """A fake libnvidia-ml of this test's own, with the config above next to it."""
    path = build_fake_nvml(str(tmp_path / "lib"), VERSION, cache_dir=stub_cache)
    config().write(os.path.dirname(path))
    return path


def test_driver_facts(lib: str) -> None:
    assert driver_facts(lib, [], ["cuda", "driver"]) == Facts("13.0", VERSION)
    assert driver_facts(lib, [0, 3], ["cuda"]) == Facts("13.0")  # no device is looked at without arch/brand
    assert driver_facts(lib, [0, 3, 5, 6], ALL_KEYS) == Facts(
        "13.0",
        VERSION,
        [
            GpuFacts("9.0", "nvidia", 0),
            GpuFacts("7.0", "tesla", 3),
            GpuFacts("8.6", "geforcertx", 5),
            GpuFacts("10.0", "unknown", 6),  # a brand libnvidia-container has no name for
        ],
    )


def test_only_the_gpus_given_to_the_container_in_nvml_order(lib: str) -> None:
    assert driver_facts(lib, [5, 0, 5], ["arch"]) == Facts(
        gpus=[GpuFacts("9.0", "", 0), GpuFacts("8.6", "", 5)]
    )
    assert driver_facts(lib, [3], ["brand"]) == Facts(gpus=[GpuFacts("", "tesla", 3)])
    assert driver_facts(lib, [], ["arch", "brand"]) == Facts()  # no GPU given: nothing to read


def test_cuda_version_reads_as_major_minor(lib: str) -> None:
    for encoded, text in (
        (12040, "12.4"),
        (11080, "11.8"),
        (10000, "10.0"),
        (12090, "12.9"),
        (13010, "13.1"),
    ):
        config(cuda_version=encoded).write(os.path.dirname(lib))
        assert driver_facts(lib, [], ["cuda"]).cuda == text


def test_nvml_that_fails_to_initialise(lib: str) -> None:
    config(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED).write(os.path.dirname(lib))
    with pytest.raises(NvmlError) as info:
        driver_facts(lib, [0], ALL_KEYS)
    assert str(info.value) == "nvmlInit failed: Driver Not Loaded"
    config(init_error=pynvml.NVML_ERROR_NO_PERMISSION).write(os.path.dirname(lib))
    with pytest.raises(NvmlError, match=r"^nvmlInit failed: Insufficient Permissions$"):
        driver_facts(lib, [], ["driver"])
    os.unlink(os.path.join(os.path.dirname(lib), "fake-nvml.conf"))  # like a host without the kernel module
    with pytest.raises(NvmlError, match=r"^nvmlInit failed: Driver Not Loaded$"):
        driver_facts(lib, [], ["cuda"])


def test_a_minor_that_nvml_does_not_list_is_an_error(lib: str) -> None:
    with pytest.raises(NvmlFactsError, match=r"^NVML lists no GPU for /dev/nvidia1, /dev/nvidia7$"):
        driver_facts(lib, [7, 0, 1], ["arch"])


def test_nvml_is_shut_down_after_each_read_even_a_failed_one(lib: str) -> None:
    # The fake rereads its config at every first nvmlInit: new answers show the last call shut NVML down.
    with pytest.raises(NvmlFactsError):
        driver_facts(lib, [9], ["cuda", "arch"])
    config(
        cuda_version=12040, gpus=[FakeGpu(0, 9, "GPU-x", "00000000:18:00.0", H100, arch="8.0")], migs=[]
    ).write(os.path.dirname(lib))
    assert driver_facts(lib, [9], ["cuda", "arch"]) == Facts("12.4", gpus=[GpuFacts("8.0", "", 9)])
    config(cuda_version=11080).write(os.path.dirname(lib))
    assert driver_facts(lib, [], ["cuda"]).cuda == "11.8"


def test_a_library_that_cannot_be_loaded(tmp_path: Path) -> None:
    with pytest.raises(LibraryError, match=r"^/.*/missing.so: No such file or directory$"):
        driver_facts(str(tmp_path / "missing.so"), [], ["cuda"])
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not ELF")
    junk.chmod(0o755)
    with pytest.raises(NvmlError, match=r"^cannot load .*/junk.so: .*junk.so"):
        driver_facts(str(junk), [], ["cuda"])


def _build(tmp_path: Path, source: str) -> str:
    (tmp_path / "lib.c").write_text(source)
    out = str(tmp_path / "libnotnvml.so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", out, str(tmp_path / "lib.c")], check=True)
    return out


def test_a_library_that_is_not_nvml(tmp_path: Path) -> None:
    lib = _build(tmp_path, "int not_nvml(void) { return 0; }\n")
    with pytest.raises(NvmlError) as info:
        driver_facts(lib, [], ["cuda"])
    assert str(info.value) == f"{lib} has no function nvmlInit: not NVML, or too old an NVML"


OLD_NVML = """
#include <string.h>
static int refs;
int nvmlInitWithFlags(unsigned int flags) { (void)flags; if (refs) return 5; refs++; return 0; }  /* 5: already initialised */
int nvmlShutdown(void) { if (!refs) return 1; refs--; return 0; }
const char *nvmlErrorString(int code) { return code == 999 ? "Unknown Error" : code == 5 ? "Already Initialized" : "?"; }
int nvmlSystemGetCudaDriverVersion(int *v) { if (!refs) return 1; *v = 11020; return 0; }
int nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    if (!refs) return 1;
    if (len < 10) return 7;
    strcpy(buf, "460.91.03");
    return 0;
}
int nvmlDeviceGetCount_v2(unsigned int *n) { (void)n; return 999; }
"""


def test_an_nvml_without_the_v2_cuda_version_and_with_failing_devices(tmp_path: Path) -> None:
    lib = _build(tmp_path, OLD_NVML)
    assert driver_facts(lib, [0], ["cuda", "driver"]) == Facts("11.2", "460.91.03")
    with pytest.raises(NvmlFactsError) as info:
        driver_facts(lib, [0], ["cuda", "brand"])
    assert str(info.value) == "nvmlDeviceGetCount_v2 failed: Unknown Error"
    assert driver_facts(lib, [], ["driver"]).driver == "460.91.03"


@pytest.mark.root
def test_a_bare_soname_is_never_loaded(make_node: NodeFactory) -> None:
    """The loader would search for it (LD_LIBRARY_PATH first): only a path that was judged is loaded."""
    node = make_node("single")
    code = (
        f"import sys; sys.path.insert(0, {REPO!r})\n"
        "from cdictk.runtime.driverfacts import read_facts\n"
        "print(read_facts('libnvidia-ml.so.1'))\n"
    )
    env = {**os.environ, "LD_LIBRARY_PATH": node.lib_dir}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith("LibraryError: libnvidia-ml.so.1: not an absolute path")


@pytest.mark.root
def test_requirements_of_a_real_image_against_the_fake_node(make_node: NodeFactory) -> None:
    node = make_node("eight")
    library = os.path.join(node.lib_dir, "libnvidia-ml.so.1")
    cuda_12_4 = (
        "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
        "brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471"
    )
    env = {"NVIDIA_REQUIRE_CUDA": cuda_12_4, "NVIDIA_REQUIRE_ARCH": "arch>=9.0", "CUDA_VERSION": "12.4.1"}
    reqs = requirements(env)
    assert needed_keys(reqs) == {"cuda", "driver", "brand", "arch"}
    check(reqs, driver_facts(library, [0, 1, 2], needed_keys(reqs)))
    reqs = requirements({"CUDA_VERSION": "13.1.0"})
    with pytest.raises(RequirementError) as info:
        check(reqs, driver_facts(library, [0], needed_keys(reqs)))
    assert str(info.value) == (
        "requirement not met: cuda>=13.1 (the driver supports CUDA 13.0): "
        "update the driver, or use an image built for an older CUDA"
    )


# ---- the fake's new answers, as pynvml (the real NVML's calling convention) sees them ---------------


@pytest.fixture
def pynvml_lib(lib: str) -> Iterator[str]:
    pynvml.nvmlLib = ctypes.CDLL(lib)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    yield lib
    while pynvml._nvmlLib_refcount > 0:
        pynvml.nvmlShutdown()
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


def test_fake_compute_capability_and_brand_through_pynvml(pynvml_lib: str) -> None:
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    assert [pynvml.nvmlDeviceGetCudaComputeCapability(h) for h in handles] == [
        (9, 0),
        (7, 0),
        (8, 6),
        (10, 0),
    ]
    assert [pynvml.nvmlDeviceGetBrand(h) for h in handles] == [
        pynvml.NVML_BRAND_NVIDIA,
        pynvml.NVML_BRAND_TESLA,
        pynvml.NVML_BRAND_GEFORCE_RTX,
        17,
    ]
    assert (NVML_BRAND_NVIDIA, NVML_BRAND_TESLA, NVML_BRAND_GEFORCE_RTX) == (
        pynvml.NVML_BRAND_NVIDIA,
        pynvml.NVML_BRAND_TESLA,
        pynvml.NVML_BRAND_GEFORCE_RTX,
    )
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handles[0], 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetCudaComputeCapability(mig)  # ask the parent GPU, as libnvidia-container does
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetBrand(mig)


def test_brand_names_cover_every_named_nvml_brand() -> None:
    named = {
        getattr(pynvml, name)
        for name in dir(pynvml)
        if name.startswith("NVML_BRAND_") and name not in ("NVML_BRAND_UNKNOWN", "NVML_BRAND_COUNT")
    }
    # libnvidia-container names 1..16; later brands (DLA, NPU, vGaming dev) read as "unknown".
    assert set(BRANDS) == {n for n in named if n <= 16}
    assert (
        BRANDS[pynvml.NVML_BRAND_NVIDIA] == "nvidia" and BRANDS[pynvml.NVML_BRAND_NVIDIA_RTX] == "nvidiartx"
    )


@pytest.mark.parametrize("arch", ["9", "9.", ".0", "9.0.1", "100.0", "9.x", "-1.0"])
def test_fake_rejects_a_bad_compute_capability(
    pynvml_lib: str, arch: str, capfd: pytest.CaptureFixture[str]
) -> None:
    config(gpus=[FakeGpu(0, 0, "GPU-a", "00000000:18:00.0", H100, arch=arch)], migs=[]).write(
        os.path.dirname(pynvml_lib)
    )
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlInit()
    assert "bad compute capability (want major.minor)" in capfd.readouterr().err
    with pytest.raises(NvmlError, match=r"^nvmlInit failed: Unknown Error$"):
        driver_facts(pynvml_lib, [0], ["arch"])


def test_fake_config_without_arch_and_brand_still_reads(lib: str) -> None:
    """Configs written before arch= and brand= existed: an H100's answers."""
    text = (
        f"driver version={VERSION} cuda=12080\ngpu index=0 minor=2 uuid=GPU-a bus=00000000:18:00.0 name=x\n"
    )
    Path(os.path.dirname(lib), "fake-nvml.conf").write_text(text)
    assert driver_facts(lib, [2], ALL_KEYS) == Facts("12.8", VERSION, [GpuFacts("9.0", "nvidia", 2)])


# The child: NVML never enters this process; a crash or a hang there is one error here.


def test_nvml_is_never_loaded_in_the_asking_process(lib: str) -> None:
    assert driver_facts(lib, [0, 3, 5, 6], ALL_KEYS).gpus[0] == GpuFacts("9.0", "nvidia", 0)
    assert os.path.dirname(lib) not in Path("/proc/self/maps").read_text(), "NVML was loaded in this process"


def test_a_child_that_dies_or_hangs_is_an_error(tmp_path: Path) -> None:
    crash = tmp_path / "crash.c"
    crash.write_text("int nvmlInitWithFlags(unsigned int f) { (void)f; __builtin_trap(); }\n")
    hang = tmp_path / "hang.c"
    hang.write_text(
        "#include <unistd.h>\nint nvmlInitWithFlags(unsigned int f) { (void)f; for (;;) pause(); }\n"
    )
    for source in (crash, hang):
        out = source.with_suffix(".so")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    with pytest.raises(NvmlError, match=r"^the child ended without an answer \(killed by signal \d+\)$"):
        read_facts(str(tmp_path / "crash.so"))
    with pytest.raises(NvmlError, match=r"^no answer within 0\.5 s"):
        read_facts(str(tmp_path / "hang.so"), deadline=0.5)
