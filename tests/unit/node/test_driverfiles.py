"""A driver tree of its own (bin, lib64, share, firmware side by side): where its files are found and
where they go in the container."""

from __future__ import annotations

from pathlib import Path

from cdictk.node import driverfiles
from cdictk.startpath.helpers.roots import Roots


def test_tree_dirs_are_beside_lib_and_lib64_only() -> None:
    dirs = ["/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/lib64", "/opt/lib"]
    assert driverfiles.tree_dirs(dirs, "share") == ["/usr/local/nvidia/share", "/share", "/opt/share"]


def _file(root: Path, path: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("{}\n")


def test_a_tree_config_goes_where_the_image_loaders_look(tmp_path: Path) -> None:
    _file(tmp_path, "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json")
    _file(tmp_path, "/usr/local/nvidia/share/OpenCL/vendors/nvidia.icd")
    _file(tmp_path, "/usr/share/glvnd/egl_vendor.d/10_nvidia.json")
    found = driverfiles.Found()
    driverfiles.find_configs(Roots(str(tmp_path)), found, ["/usr/local/nvidia/lib64"])
    assert {f.path: f.host_path.removeprefix(str(tmp_path)) for f in found.files} == {
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json": "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/vulkan/icd.d/nvidia_icd.json": "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json",
        "/etc/OpenCL/vendors/nvidia.icd": "/usr/local/nvidia/share/OpenCL/vendors/nvidia.icd",
    }


def test_a_standard_dir_wins_over_the_tree(tmp_path: Path) -> None:
    _file(tmp_path, "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json")
    _file(tmp_path, "/etc/vulkan/icd.d/nvidia_icd.json")
    found = driverfiles.Found()
    driverfiles.find_configs(Roots(str(tmp_path)), found, ["/usr/local/nvidia/lib64"])
    assert [f.path for f in found.files] == ["/etc/vulkan/icd.d/nvidia_icd.json"]


def test_firmware_beside_the_libraries_of_a_driver_root_at_the_tree(tmp_path: Path) -> None:
    """GKE's firmware path names /usr/local/nvidia/firmware on the host; with --driver-root at that
    tree it is /firmware."""
    _file(tmp_path, "/firmware/nvidia/580.95.05/gsp_ga10x.bin")
    (tmp_path / "sys/module/firmware_class/parameters").mkdir(parents=True)
    (tmp_path / "sys/module/firmware_class/parameters/path").write_text("/usr/local/nvidia/firmware\n")
    roots = Roots(str(tmp_path), sys=str(tmp_path / "sys"))
    found = driverfiles.Found()
    driverfiles.find_firmware(roots, "580.95.05", found, ["/lib64"])
    assert [(f.path, f.host_path) for f in found.files] == [
        (
            "/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin",
            f"{tmp_path}/firmware/nvidia/580.95.05/gsp_ga10x.bin",
        )
    ]
    assert found.missing == []
