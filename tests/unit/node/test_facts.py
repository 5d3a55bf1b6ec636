"""Each discoverer against a fake GPU node (real ELF stubs, ld.so.cache, mknod nodes, fake NVML)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from cdictk.node import devnodes, driverfiles, procfs
from cdictk.node.drm import drm_for_gpu
from cdictk.node.facts import DiscoveryError, discover
from cdictk.node.libraries import candidate_dirs, find_driver_libraries, is_driver_library
from cdictk.node.modes import Mode
from cdictk.node.nvml import NvmlQuery, query_nvml
from cdictk.node.nvmllib import NvmlError
from tests.conftest import NodeFactory, roots_of
from tests.fakenode.node import CAPS_MAJOR, LIB_DIR, UVM_MAJOR, mig_cap_minor

V = "580.95.05"


@pytest.mark.root
def test_device_nodes(make_node: NodeFactory) -> None:
    node = make_node("single")
    roots = roots_of(node)
    control = {n.path: (n.major, n.minor, n.mode) for n in devnodes.control_nodes(roots)}
    assert control == {
        "/dev/nvidiactl": (195, 255, 0o666),
        "/dev/nvidia-modeset": (195, 254, 0o666),
        "/dev/nvidia-uvm": (UVM_MAJOR, 0, 0o666),
        "/dev/nvidia-uvm-tools": (UVM_MAJOR, 1, 0o666),
    }
    gpu = devnodes.gpu_node(roots, 0)
    assert (
        gpu is not None and gpu.host_path == node.root + "/dev/nvidia0" and (gpu.major, gpu.minor) == (195, 0)
    )
    assert devnodes.gpu_node(roots, 1) is None
    # A regular file or a symlink where a node should be is not a device node.
    Path(node.root, "dev/nvidia7").write_text("")
    os.symlink("nvidia0", node.root + "/dev/nvidia8")
    assert devnodes.gpu_node(roots, 7) is None and devnodes.gpu_node(roots, 8) is None
    cap = devnodes.cap_node(roots, 1, CAPS_MAJOR)
    assert cap is not None and cap.mode == 0o400
    # A cap node not created yet is made from the procfs facts.
    made = devnodes.cap_node(roots, 500, CAPS_MAJOR)
    assert made is not None and (made.major, made.minor, made.mode) == (CAPS_MAJOR, 500, None)
    assert devnodes.cap_node(roots, 500, None) is None


@pytest.mark.root
def test_management_nodes_leave_out_other_drivers(make_node: NodeFactory) -> None:
    roots = roots_of(make_node("eight"))
    paths = [n.path for n in devnodes.all_nvidia_nodes(roots)]
    assert "/dev/nvidia7" in paths and "/dev/nvidiactl" in paths
    assert "/dev/nvidia-caps/nvidia-cap1" in paths
    assert "/dev/nvidia-nvswitchctl" not in paths


@pytest.mark.root
def test_drm_nodes_and_by_path_links(make_node: NodeFactory) -> None:
    node = make_node("eight")
    drm = drm_for_gpu(roots_of(node), "0000:2a:00.0")
    assert [(n.path, n.gid, n.mode) for n in drm.nodes] == [
        ("/dev/dri/card2", 44, 0o660),
        ("/dev/dri/renderD129", 105, 0o660),
    ]
    assert drm.links == [
        ("../card2", "/dev/dri/by-path/pci-0000:2a:00.0-card"),
        ("../renderD129", "/dev/dri/by-path/pci-0000:2a:00.0-render"),
    ]
    assert drm_for_gpu(roots_of(node), "0000:ff:00.0").nodes == []


@pytest.mark.root
def test_procfs_facts(make_node: NodeFactory) -> None:
    roots = roots_of(make_node("eight"))
    assert procfs.read_driver_version(roots) == V
    assert procfs.read_loaded_modules(roots) == {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"}
    assert procfs.read_char_majors(roots)["nvidia-caps"] == CAPS_MAJOR
    assert len(procfs.read_proc_gpus(roots)) == 8
    minors = procfs.read_mig_minors(roots)
    assert minors is not None and minors.access[(0, 7, 0)] == mig_cap_minor(0, 7, 0) == 67


@pytest.mark.root
def test_ld_cache_directories(make_node: NodeFactory) -> None:
    node = make_node("single")
    warnings: list[str] = []
    dirs = candidate_dirs(roots_of(node), warnings)
    assert dirs[0] == LIB_DIR and not warnings
    # A corrupt cache: one warning, and the usual directories still find the driver.
    Path(node.root, "etc/ld.so.cache").write_bytes(b"garbage")
    dirs = candidate_dirs(roots_of(node), warnings)
    assert LIB_DIR in dirs
    assert warnings == [
        f"{node.root}/etc/ld.so.cache: not an ld.so.cache (bad magic); searching the usual library directories instead"
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"libcuda.so.{V}", True),
        ("libnvidia-api.so.1", True),
        ("libnvidia-egl-wayland.so.1.1.19", True),
        ("libGLX_nvidia.so.0", True),
        ("libnvidia-ml.so.550.54.15", False),
        ("libfoo.so.1.2.3", False),
        ("libcuda.so.1", False),
    ],
)
def test_which_files_are_driver_libraries(name: str, expected: bool) -> None:
    assert is_driver_library(name, V) is expected


@pytest.mark.root
def test_driver_libraries_sonames_and_links(make_node: NodeFactory) -> None:
    node = make_node("single")
    roots = roots_of(node)
    scan = find_driver_libraries(roots, V, candidate_dirs(roots, []))
    by_path = {lib.path: lib.soname for lib in scan.libraries}
    assert scan.dirs == [LIB_DIR, LIB_DIR + "/vdpau"] or scan.dirs == [LIB_DIR]
    assert by_path[f"{LIB_DIR}/libcuda.so.{V}"] == "libcuda.so.1"
    assert by_path[f"{LIB_DIR}/vdpau/libvdpau_nvidia.so.{V}"] == "libvdpau_nvidia.so.1"
    assert by_path[f"{LIB_DIR}/libnvidia-api.so.1"] == "libnvidia-api.so.1"
    assert f"{LIB_DIR}/libnvidia-egl-wayland.so.1.1.19" in by_path
    assert f"{LIB_DIR}/libnvidia-ml.so.550.54.15" not in by_path
    assert f"{LIB_DIR}/libfoo.so.1.2.3" not in by_path
    assert len(by_path) == len(scan.libraries)  # no library twice
    links = set(scan.links)
    assert (f"libcuda.so.{V}", f"{LIB_DIR}/libcuda.so.1") in links
    assert ("libcuda.so.1", f"{LIB_DIR}/libcuda.so") in links
    assert (f"libGLX_nvidia.so.{V}", f"{LIB_DIR}/libGLX_indirect.so.0") in links
    assert ("../libnvidia-allocator.so.1", f"{LIB_DIR}/gbm/nvidia-drm_gbm.so") in links
    assert not any(link.endswith("libfoo.so.1") for _, link in links)


@pytest.mark.root
def test_missing_soname_link_is_added(make_node: NodeFactory) -> None:
    node = make_node("single")
    os.unlink(f"{node.lib_dir}/libcudadebugger.so.1")
    roots = roots_of(node)
    scan = find_driver_libraries(roots, V, candidate_dirs(roots, []))
    assert (f"libcudadebugger.so.{V}", f"{LIB_DIR}/libcudadebugger.so.1") in scan.links


@pytest.mark.root
def test_firmware_goes_to_lib_firmware_whatever_the_hosts_layout(make_node: NodeFactory) -> None:
    node = make_node("single")
    custom = Path(node.root, "opt/fw/nvidia", V)
    custom.mkdir(parents=True)
    for name in os.listdir(f"{node.root}/lib/firmware/nvidia/{V}"):
        os.rename(f"{node.root}/lib/firmware/nvidia/{V}/{name}", custom / name)
    Path(node.sys, "module/firmware_class/parameters").mkdir(parents=True, exist_ok=True)
    Path(node.sys, "module/firmware_class/parameters/path").write_text("/opt/fw\n")
    found = driverfiles.Found()
    driverfiles.find_firmware(roots_of(node), V, found)
    assert [(f.path, f.host_path) for f in found.files if f.path.endswith("gsp_ga10x.bin")] == [
        (f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin", str(custom / "gsp_ga10x.bin"))
    ]


@pytest.mark.root
def test_the_gl_loaders_links_are_made_when_the_host_lacks_them(make_node: NodeFactory) -> None:
    """GBM and GLVND's indirect GLX look these names up; NVIDIA makes them, and so do we."""
    node = make_node("single")
    os.unlink(f"{node.lib_dir}/gbm/nvidia-drm_gbm.so")
    os.unlink(f"{node.lib_dir}/libGLX_indirect.so.0")
    roots = roots_of(node)
    scan = find_driver_libraries(roots, V, candidate_dirs(roots, []))
    assert ("../libnvidia-allocator.so.1", f"{LIB_DIR}/gbm/nvidia-drm_gbm.so") in scan.links
    assert (f"libGLX_nvidia.so.{V}", f"{LIB_DIR}/libGLX_indirect.so.0") in scan.links
    os.symlink("libGLX_mesa.so.0", f"{node.lib_dir}/libGLX_indirect.so.0")  # the host's choice stands
    scan = find_driver_libraries(roots, V, candidate_dirs(roots, []))
    assert not any(link.endswith("/libGLX_indirect.so.0") for _, link in scan.links)


@pytest.mark.root
def test_a_wrapper_script_is_not_the_driver_binary(make_node: NodeFactory) -> None:
    """GKE's layout: /usr/bin/nvidia-smi execs /usr/local/nvidia/bin/nvidia-smi, the ELF program."""
    node = make_node("single")
    elf = Path(node.root, "usr/local/nvidia/bin/nvidia-smi")
    elf.parent.mkdir(parents=True)
    Path(node.root, "usr/bin/nvidia-smi").rename(elf)
    Path(node.root, "usr/bin/nvidia-smi").write_text("#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi\n")
    found = driverfiles.Found()
    driverfiles.find_binaries(roots_of(node), found)
    smi = next(f for f in found.files if f.path.endswith("/nvidia-smi"))
    assert (smi.path, smi.host_path) == ("/usr/bin/nvidia-smi", str(elf))  # on every image's PATH
    elf.unlink()
    found = driverfiles.Found()
    driverfiles.find_binaries(roots_of(node), found)
    assert "nvidia-smi (only /usr/bin/nvidia-smi, not an ELF program)" in found.missing
    assert (
        driverfiles.binary_dirs(["/opt/driver/lib64", "/usr/lib/x86_64-linux-gnu"])[-1] == "/opt/driver/bin"
    )


@pytest.mark.root
def test_driver_files(make_node: NodeFactory) -> None:
    node = make_node("eight")
    roots = roots_of(node)
    found = driverfiles.Found()
    driverfiles.find_binaries(roots, found)
    driverfiles.find_firmware(roots, V, found)
    driverfiles.find_ipc(roots, found)
    driverfiles.find_configs(roots, found)
    driverfiles.find_xorg_modules(roots, V, [LIB_DIR], found)
    kinds = {f.path: f.kind for f in found.files}
    assert kinds["/usr/bin/nvidia-smi"] is driverfiles.FileKind.BINARY
    assert kinds[f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin"] is driverfiles.FileKind.FIRMWARE
    assert kinds["/run/nvidia-persistenced/socket"] is driverfiles.FileKind.SOCKET
    assert kinds["/tmp/nvidia-mps"] is driverfiles.FileKind.DIRECTORY
    assert kinds["/usr/share/vulkan/icd.d/nvidia_icd.json"] is driverfiles.FileKind.CONFIG
    assert kinds["/etc/OpenCL/vendors/nvidia.icd"] is driverfiles.FileKind.CONFIG
    assert kinds[f"{LIB_DIR}/nvidia/xorg/nvidia_drv.so"] is driverfiles.FileKind.XORG
    assert (f"libglxserver_nvidia.so.{V}", f"{LIB_DIR}/nvidia/xorg/libglxserver_nvidia.so") in found.links
    assert found.missing == ["nvidia-imex", "nvidia-imex-ctl"]


@pytest.mark.root
def test_a_lost_gpu_is_left_out_and_the_others_stay_as_nvml_reports_them(make_node: NodeFactory) -> None:
    """One lost GPU (3) must not make discovery fall back to procfs for all GPUs, MIG devices and all."""
    node = make_node("eight")
    healthy = discover(roots_of(node), Mode.AUTO)
    config = node.nvml_config()
    config.gpus[3] = replace(config.gpus[3], lost=True)
    node.write_nvml_config(config)
    facts = discover(roots_of(node), Mode.AUTO)
    assert facts.mode is Mode.NVML
    assert facts.gpus == [gpu for gpu in healthy.gpus if gpu.index != 3]  # MIG devices and all
    assert facts.faulty == ["GPU 3: GPU is lost"]
    assert any(
        "GPU 3: GPU is lost: NVML cannot describe it; left out" in warning for warning in facts.warnings
    )


@pytest.mark.root
def test_an_nvml_that_fails_or_hangs_is_an_error_never_a_procfs_fallback(make_node: NodeFactory) -> None:
    node = make_node("eight")
    config = node.nvml_config()
    config.init_error = 999
    node.write_nvml_config(config)
    with pytest.raises(NvmlError, match="nvmlInit failed"):
        discover(roots_of(node), Mode.AUTO)  # procfs would advertise the MIG GPU as a full GPU
    config.init_error, config.init_hang = 0, True
    node.write_nvml_config(config)
    with pytest.raises(NvmlError, match=r"no answer within 0\.5 s: the driver may be hung"):
        query_nvml(f"{node.lib_dir}/libnvidia-ml.so.1", deadline=0.5)


@pytest.mark.root
def test_discover_falls_back_to_procfs_without_nvml(make_node: NodeFactory) -> None:
    node = make_node("eight")
    os.unlink(f"{node.lib_dir}/libnvidia-ml.so.1")
    facts = discover(roots_of(node), Mode.AUTO)
    # GPU 0 is in MIG mode: procfs knows no MIG device, so it is left out, never given as a full GPU.
    assert facts.mode is Mode.PROCFS and [gpu.index for gpu in facts.gpus] == [1, 2, 3, 4, 5, 6, 7]
    assert not any(gpu.mig_enabled for gpu in facts.gpus)
    assert any("falling back to /proc/driver/nvidia/gpus" in w for w in facts.warnings)
    assert any(w.startswith("GPU 0 (") and "is in MIG mode" in w for w in facts.warnings)
    with pytest.raises(NvmlError, match="not found under"):
        discover(roots_of(node), Mode.NVML)


@pytest.mark.root
def test_driver_version_sources(make_node: NodeFactory) -> None:
    node = make_node("single")
    os.unlink(f"{node.proc}/driver/nvidia/version")
    assert discover(roots_of(node), Mode.AUTO).driver_version == V  # from NVML
    assert discover(roots_of(node), Mode.PROCFS).driver_version == V  # from libcuda.so.<version>


@pytest.mark.root
def test_no_gpus_is_an_error_that_explains(make_node: NodeFactory) -> None:
    node = make_node("single")
    for name in os.listdir(f"{node.proc}/driver/nvidia/gpus"):
        os.unlink(f"{node.proc}/driver/nvidia/gpus/{name}/information")
    Path(node.proc, "modules").write_text("ext4 1 0 - Live 0x0\n")
    with pytest.raises(
        DiscoveryError, match=r"no NVIDIA GPUs found \(procfs\); the nvidia kernel module is not loaded"
    ):
        discover(roots_of(node), Mode.PROCFS)


@pytest.mark.root
def test_missing_nodes_are_explained(make_node: NodeFactory) -> None:
    node = make_node("single")
    os.unlink(node.root + "/dev/nvidia-uvm")
    Path(node.proc, "modules").write_text("nvidia 1 0 - Live 0x0\n")
    facts = discover(roots_of(node), Mode.AUTO)
    assert (
        "/dev/nvidia-uvm is missing; the nvidia_uvm module is not loaded: CUDA in containers will fail without it"
        in facts.warnings
    )


@pytest.mark.root
def test_a_query_never_asked_cannot_be_answered_and_is_closed_by_discovery(make_node: NodeFactory) -> None:
    node = make_node("single")
    unasked = NvmlQuery()
    with pytest.raises(NvmlError, match="never asked"):
        unasked.answer()
    unasked.close()
    # A mode that needs no NVML closes the query it was given, and its child is reaped.
    given = NvmlQuery()
    pid = given._child._pid
    assert pid is not None
    facts = discover(roots_of(node), Mode.MANAGEMENT, nvml=given)
    assert facts.mode is Mode.MANAGEMENT and given._child._pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    # A mode that does asks it.
    asked = NvmlQuery()
    assert [gpu.index for gpu in discover(roots_of(node), Mode.NVML, nvml=asked).gpus] == [0]
    assert asked._child._pid is None
