"""WSL2's driver: the store found by scanning, its files, and the driver version from NVML (the
cache's, root's alone with the libdxcore.so it opens)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.node import wsl
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import PlatformFactory
from tests.fakenode.planted import USER, plant, ran
from tests.fakenode.platforms import WSL_EXTRA, WSL_STORE, WSL_VERSION, PlatformNode


def roots(node: PlatformNode) -> Roots:
    return Roots(node.root, node.root, node.proc, node.sys)


@pytest.mark.root
def test_the_store_with_libcuda_and_its_files(make_platform: PlatformFactory) -> None:
    node = make_platform("wsl")
    assert wsl.has_dxcore(roots(node))
    assert wsl.driver_stores(roots(node)) == [WSL_STORE]  # Intel's store holds no libcuda.so.1.1
    found = wsl.find_driver(roots(node))
    assert found is not None and found.missing == [] and found.warnings == []
    assert found.libraries[0] == "/usr/lib/wsl/lib/libdxcore.so"
    names = {os.path.basename(path) for path in found.libraries + found.files}
    assert names == {"libdxcore.so", *(os.path.basename(path) for path in node.files)}
    assert set(WSL_EXTRA) <= names and "nv_dispi.inf" not in names and "fake-nvml.conf" not in names
    assert [os.path.basename(path) for path in found.files] == [
        "nvcubins.bin",
        "nvdxgdmal64.dll",
        "nvidia-smi",
        "nvptxJitCompiler64.dll",
    ]
    assert found.links == [(f"{WSL_STORE}/nvidia-smi", "/usr/bin/nvidia-smi")]


@pytest.mark.root
def test_what_the_store_lacks_is_named_and_a_second_store_warned_of(make_platform: PlatformFactory) -> None:
    node = make_platform("wsl")
    Path(node.root + WSL_STORE, "nvcubins.bin").unlink()
    Path(node.root, "usr/lib/wsl/lib/libdxcore.so").unlink()
    newer = Path(node.root, "usr/lib/wsl/drivers/nv_dispi.inf_amd64_ffff")
    newer.mkdir()
    (newer / "libcuda.so.1.1").write_bytes(b"\x7fELF")
    found = wsl.find_driver(roots(node))
    assert found is not None
    assert found.missing == ["/usr/lib/wsl/lib/libdxcore.so", f"{WSL_STORE}/nvcubins.bin"]
    assert found.warnings == [
        f"several NVIDIA driver stores, using the first: {WSL_STORE}, /usr/lib/wsl/drivers/nv_dispi.inf_amd64_ffff"
    ]


def test_no_store_no_driver(tmp_path: Path) -> None:
    empty = Roots(str(tmp_path), str(tmp_path))
    assert wsl.find_driver(empty) is None
    assert wsl.driver_version(empty, []) == ""


@pytest.mark.root
def test_the_version_from_nvml_else_from_a_versioned_name_else_none(make_platform: PlatformFactory) -> None:
    node = make_platform("wsl")
    warnings: list[str] = []
    assert wsl.driver_version(roots(node), warnings) == WSL_VERSION and warnings == []
    store = Path(node.root + WSL_STORE)
    (store / "fake-nvml.conf").write_text("driver version=581.42 cuda=13000\ninit error=9 hang=0\n")
    assert wsl.driver_version(roots(node), warnings) == ""
    assert "NVML" in warnings[0] and warnings[0].endswith(
        "the driver version comes from the store's file names"
    )
    (store / "libnvidia-gpucomp.so.581.42").write_bytes(b"\x7fELF")
    assert wsl.driver_version(roots(node), []) == "581.42"


@pytest.mark.root
@pytest.mark.parametrize("soname", ["libnvidia-ml.so.1", "libdxcore.so"])
def test_a_users_nvml_or_dxcore_in_the_caches_place_never_runs(
    make_platform: PlatformFactory, tmp_path: Path, soname: str
) -> None:
    """NVML is the cache's (/usr/lib/wsl/lib), never a store's file found by listing, and is loaded
    only when it and the libdxcore.so it opens by name are root's alone: a user's file in either
    place (a Windows driver update is root's; a user's copy is not) stops NVML's load, and the
    version comes from the store's names."""
    node = make_platform("wsl")
    lib = Path(node.root, "usr/lib/wsl/lib")
    (lib / soname).unlink()
    marker = str(tmp_path / "ran")
    planted = plant(str(lib), soname, marker)
    warnings: list[str] = []
    assert wsl.driver_version(roots(node), warnings) == ""
    assert ran(marker) == []
    opened = "" if soname == "libnvidia-ml.so.1" else "libdxcore.so, which it opens: "
    assert warnings == [
        f"libnvidia-ml.so.1: {opened}{planted}: owned by uid {USER}, not root: not loaded (cdictk would "
        "run its code as root); the driver version comes from the store's file names"
    ]
