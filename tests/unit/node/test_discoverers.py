"""The discoverers of a spec's common edits, each on its own: what it finds on a fake node, what it
warns about, and how the results merge."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.node.discoverers import COMMON, Context, Found, discover_common
from cdictk.node.libraries import candidate_dirs
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import NodeFactory, PlatformFactory, roots_of
from tests.fakenode.node import FakeNode

V = "580.95.05"


def context_of(node: FakeNode, version: str = V, modules: set[str] | None = None) -> Context:
    roots = roots_of(node)
    return Context(roots, version, modules, candidate_dirs(roots, []))


def empty_context(tmp_path: Path, modules: set[str] | None = None) -> Context:
    roots = Roots(str(tmp_path), str(tmp_path), str(tmp_path / "proc"), str(tmp_path / "sys"))
    return Context(roots, "1.2.3", modules, [])


def test_discoverers_merge_in_order_and_sum_up_what_is_missing(tmp_path: Path) -> None:
    roots = Roots(str(tmp_path), str(tmp_path), str(tmp_path / "proc"), str(tmp_path / "sys"))
    context = Context(roots, "1.2.3", {"nvidia"}, [])
    found = discover_common(("control-nodes", "binaries", "firmware"), context)
    assert found.nodes == [] and found.files == []
    assert found.warnings[0] == (
        "/dev/nvidiactl is missing: CUDA in containers will fail without it"
    )  # the nvidia module is loaded: no module to blame
    assert "/dev/nvidia-uvm is missing; the nvidia_uvm module is not loaded" in found.warnings[1]
    assert found.warnings[-1] == (
        "not found, left out (optional): nvidia-smi, nvidia-debugdump, nvidia-persistenced, "
        "nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex, nvidia-imex-ctl, GSP firmware for 1.2.3"
    )
    merged = Found()
    merged.add(Found(missing=["a"], links=[("t", "/l")]))
    merged.add(Found(missing=["b"]))
    assert (merged.missing, merged.links) == (["a", "b"], [("t", "/l")])


def test_a_missing_node_blames_no_module_when_the_modules_are_unknown(tmp_path: Path) -> None:
    found = COMMON["control-nodes"](empty_context(tmp_path, modules=None))
    assert found.warnings == [
        f"{path} is missing: CUDA in containers will fail without it"
        for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    ]


@pytest.mark.root
def test_the_control_nodes_of_a_node_warn_about_nothing(make_node: NodeFactory) -> None:
    found = COMMON["control-nodes"](context_of(make_node("single"), modules={"nvidia", "nvidia_uvm"}))
    assert found.warnings == []
    assert {node.path for node in found.nodes} >= {"/dev/nvidiactl", "/dev/nvidia-uvm"}


@pytest.mark.root
def test_the_driver_libraries_and_a_libcuda_of_another_version(make_node: NodeFactory) -> None:
    node = make_node("single")
    context = context_of(node)
    found = COMMON["driver-libraries"](context)
    assert f"{node.lib_dir.removeprefix(node.root)}/libcuda.so.{V}" in [lib.path for lib in found.libraries]
    assert found.warnings == []
    assert context.libraries() is context.libraries()  # scanned once, for every discoverer that asks
    other = COMMON["driver-libraries"](context_of(node, version="1.0.0"))
    assert other.warnings == [f"libcuda.so.1.0.0 not found under {node.root}: CUDA in containers will fail"]


@pytest.mark.root
def test_a_library_whose_name_a_spec_cannot_carry_is_left_out_with_a_warning(make_node: NodeFactory) -> None:
    node = make_node("single")
    os.link(f"{node.lib_dir}/libcuda.so.{V}", f"{node.lib_dir}/libnvidia-bad::name.so.{V}")
    found = COMMON["driver-libraries"](context_of(node))
    assert any(w.startswith("left out, names a spec cannot carry") and "::" in w for w in found.warnings)
    assert not any("::" in lib.path for lib in found.libraries)


@pytest.mark.root
def test_the_file_discoverers_find_the_nodes_files(make_node: NodeFactory) -> None:
    context = context_of(make_node("eight"))  # the preset whose daemons run: sockets and the MPS dir
    names = {name: {f.path for f in COMMON[name](context).files} for name in ("binaries", "ipc", "configs")}
    assert "/usr/bin/nvidia-smi" in names["binaries"]
    assert "/run/nvidia-persistenced/socket" in names["ipc"]
    assert "/etc/OpenCL/vendors/nvidia.icd" in names["configs"]
    assert COMMON["firmware"](context).files or COMMON["firmware"](context).missing


def test_no_driver_store_is_an_error_in_wsl_mode(tmp_path: Path) -> None:
    with pytest.raises(
        CdictkError, match=r"no NVIDIA driver store: no libcuda\.so\.1\.1 in .*Windows NVIDIA"
    ):
        COMMON["wsl-driver"](empty_context(tmp_path))


@pytest.mark.root
def test_a_wsl_driver_store(make_platform: PlatformFactory) -> None:
    platform = make_platform("wsl")
    roots = Roots(platform.root, platform.root, platform.proc, platform.sys)
    found = COMMON["wsl-driver"](Context(roots, "", None, []))
    mounted = {lib.path for lib in found.libraries} | {f.path for f in found.files}
    assert set(platform.files) <= mounted


@pytest.mark.root
def test_gds_files_only_where_nvidia_fs_nodes_are(tmp_path: Path, make_platform: PlatformFactory) -> None:
    assert COMMON["gds-files"](empty_context(tmp_path)) == Found()
    platform = make_platform("gds")
    roots = Roots(platform.root, platform.root, platform.proc, platform.sys)
    found = COMMON["gds-files"](Context(roots, "", None, []))
    assert sorted(f.path for f in found.files) == sorted(platform.files) and found.missing == []
    os.unlink(platform.root + "/etc/cufile.json")
    os.mkdir(platform.root + "/etc/cufile.json")  # a directory where a file belongs: left out
    found = COMMON["gds-files"](Context(roots, "", None, []))
    assert [f.path for f in found.files] == ["/run/udev"] and found.missing == ["/etc/cufile.json"]
    assert stat.S_ISDIR(os.lstat(platform.root + "/etc/cufile.json").st_mode)


@pytest.mark.root
def test_a_jetsons_csv_files(make_platform: PlatformFactory) -> None:
    platform = make_platform("jetson")
    roots = Roots(platform.root, platform.root, platform.proc, platform.sys)
    found = COMMON["csv-files"](Context(roots, "", None, []))
    assert sorted(n.path for n in found.device_nodes) == sorted(platform.nodes)
    libraries = {lib.path: lib.soname for lib in found.libraries}
    assert libraries[f"{platform.files[0]}"] == "libcuda.so.1"
    assert set(platform.files) <= set(libraries) | {f.path for f in found.files}
    assert any(link.endswith("/libcuda.so.1") for _, link in found.links)
