"""Everything the generator needs to know about a node, gathered in one pass from its roots."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

from cdictk.errors import CdictkError
from cdictk.node import devnodes, driverfiles, procfs
from cdictk.node.devnodes import NodeInfo
from cdictk.node.drm import DrmInfo, drm_for_gpu
from cdictk.node.elfinfo import SonameReader
from cdictk.node.gpus import Gpu, gpus_from_procfs
from cdictk.node.libraries import LibraryScan, candidate_dirs, find_driver_libraries, version_from_libraries
from cdictk.node.roots import Roots, join, resolve

NVML_LIBRARY = "libnvidia-ml.so.1"


class Mode(Enum):
    AUTO = "auto"  # NVML when it loads and answers, else procfs (with a warning)
    NVML = "nvml"  # NVML or fail
    PROCFS = "procfs"  # /proc/driver/nvidia/gpus only: full GPUs, no MIG
    MANAGEMENT = "management"  # every NVIDIA node in one device, no GPU list needed


class DiscoveryError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "", reason)


@dataclass(slots=True)
class NodeFacts:
    roots: Roots
    mode: Mode  # the mode that produced the GPU list (never AUTO)
    driver_version: str
    gpus: list[Gpu]
    modules: set[str] | None  # NVIDIA modules loaded; None when /proc/modules is unreadable
    control_nodes: list[NodeInfo]
    gpu_nodes: dict[int, NodeInfo]  # by minor
    drm: dict[str, DrmInfo]  # by PCI bus id
    mig_minors: procfs.MigMinors | None
    caps_major: int | None
    management_nodes: list[NodeInfo]
    libraries: LibraryScan
    files: driverfiles.Found
    warnings: list[str] = field(default_factory=list)


def find_nvml_library(roots: Roots, dirs: list[str]) -> str | None:
    """The host path of the driver root's libnvidia-ml.so.1, symlinks resolved inside the root."""
    for directory in dirs:
        real = resolve(roots.driver, f"{directory}/{NVML_LIBRARY}")
        if real is not None:
            return join(roots.driver, real)
    return None


def discover(roots: Roots, mode: Mode, *, mps_pipe_dir: str = driverfiles.MPS_PIPE_DIR) -> NodeFacts:
    warnings: list[str] = []
    modules = procfs.read_loaded_modules(roots)
    majors = procfs.read_char_majors(roots)
    candidates = candidate_dirs(roots, warnings)

    version = procfs.read_driver_version(roots)
    gpus: list[Gpu] = []
    used = mode
    if mode in (Mode.AUTO, Mode.NVML):
        gpus, nvml_version, used = _gpus_from_nvml(roots, mode, candidates, warnings)
        version = version or nvml_version
    if used is Mode.PROCFS:
        gpus = gpus_from_procfs(procfs.read_proc_gpus(roots))
    version = version or version_from_libraries(roots, candidates)
    if not version:
        raise DiscoveryError(
            "no NVIDIA driver found: no /proc/driver/nvidia/version, no NVML and no "
            f"libcuda.so.<version> under {roots.driver}" + _module_hint(modules)
        )

    control = devnodes.control_nodes(roots)
    management = devnodes.all_nvidia_nodes(roots) if mode is Mode.MANAGEMENT else []
    if mode is Mode.MANAGEMENT and not management:
        raise DiscoveryError(f"no NVIDIA device nodes under {roots.in_dev('/dev')}" + _module_hint(modules))
    if mode is not Mode.MANAGEMENT and not gpus:
        raise DiscoveryError(f"no NVIDIA GPUs found ({used.value})" + _module_hint(modules))

    gpu_nodes = {}
    for gpu in gpus:
        node = devnodes.gpu_node(roots, gpu.minor)
        if node is None:
            warnings.append(f"GPU {gpu.index} ({gpu.uuid}): /dev/nvidia{gpu.minor} is missing; GPU left out")
        else:
            gpu_nodes[gpu.minor] = node
    _check_control_nodes(control, modules, warnings)

    reader = SonameReader()
    libraries = find_driver_libraries(roots, version, candidates, reader)
    warnings.extend(libraries_warnings(libraries, version, roots))
    if libraries.skipped:
        names = ", ".join(libraries.skipped)
        warnings.append(f"left out, names a spec cannot carry (not UTF-8, or '::'): {names}")
    found = driverfiles.Found()
    driverfiles.find_binaries(roots, found)
    driverfiles.find_firmware(roots, version, found)
    driverfiles.find_ipc(roots, found, mps_pipe_dir)
    driverfiles.find_configs(roots, found)
    driverfiles.find_xorg_modules(roots, version, libraries.dirs, found)
    if found.missing:
        warnings.append("not found, left out (optional): " + ", ".join(found.missing))

    mig_gpus = {gpu.minor for gpu in gpus if gpu.mig_enabled}
    return NodeFacts(
        roots=roots,
        mode=used,
        driver_version=version,
        gpus=gpus,
        modules=modules,
        control_nodes=control,
        gpu_nodes=gpu_nodes,
        drm={gpu.bus_id: drm_for_gpu(roots, gpu.bus_id) for gpu in gpus},
        mig_minors=procfs.read_mig_minors(roots, mig_gpus) if mig_gpus else None,
        caps_major=majors.get("nvidia-caps"),
        management_nodes=management,
        libraries=libraries,
        files=found,
        warnings=warnings,
    )


def _gpus_from_nvml(
    roots: Roots, mode: Mode, candidates: list[str], warnings: list[str]
) -> tuple[list[Gpu], str | None, Mode]:
    from cdictk.node.nvml import NvmlError, query_nvml  # noqa: PLC0415 (pynvml is heavy)

    library = find_nvml_library(roots, candidates)
    try:
        if library is None:
            raise NvmlError(NVML_LIBRARY, f"not found under {roots.driver}")
        version, gpus = query_nvml(library)
    except NvmlError as exc:
        if mode is Mode.NVML:
            raise
        warnings.append(f"{exc}; falling back to /proc/driver/nvidia/gpus (full GPUs only, no MIG)")
        return [], None, Mode.PROCFS
    return gpus, version, Mode.NVML


def _module_hint(modules: set[str] | None) -> str:
    if modules is not None and "nvidia" not in modules:
        return "; the nvidia kernel module is not loaded (/proc/modules)"
    return ""


def _check_control_nodes(control: list[NodeInfo], modules: set[str] | None, warnings: list[str]) -> None:
    present = {node.path for node in control}
    why = {
        "/dev/nvidiactl": "nvidia",
        "/dev/nvidia-uvm": "nvidia_uvm",
        "/dev/nvidia-uvm-tools": "nvidia_uvm",
    }
    for path, module in why.items():
        if path in present:
            continue
        reason = (
            f"; the {module} module is not loaded" if modules is not None and module not in modules else ""
        )
        warnings.append(f"{path} is missing{reason}: CUDA in containers will fail without it")


def libraries_warnings(scan: LibraryScan, version: str, roots: Roots) -> list[str]:
    names = {os.path.basename(library.path) for library in scan.libraries}
    if f"libcuda.so.{version}" not in names:
        return [f"libcuda.so.{version} not found under {roots.driver}: CUDA in containers will fail"]
    return []
