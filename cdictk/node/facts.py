"""Everything the generator needs to know about a node, gathered in one pass from its roots.

The generate mode's recipe (:mod:`cdictk.node.modes`) says how the GPU list is found and which
discoverers (:mod:`cdictk.node.discoverers`) give the common edits; this module runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdictk.node import devnodes, driverfiles, platform, procfs, wsl
from cdictk.node.csvfiles import CsvSource
from cdictk.node.devnodes import NodeInfo
from cdictk.node.discoverers import Context, Found, discover_common
from cdictk.node.drivercontainer import in_driver_container
from cdictk.node.drm import DrmInfo, drm_for_gpu
from cdictk.node.gpus import Gpu, gpus_from_procfs
from cdictk.node.libchoice import LibraryError
from cdictk.node.libraries import candidate_dirs, version_from_libraries
from cdictk.node.modes import MODES, NVML_SOURCES, DriverSource, GpuSource, Mode
from cdictk.node.nvml import NvmlQuery, query_nvml
from cdictk.node.nvmllib import NVML, NvmlError, nvml_library
from cdictk.node.platform import Platform
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots


class DiscoveryError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "", reason)


@dataclass(slots=True)
class NodeFacts:
    roots: Roots
    mode: Mode  # the mode that produced the spec's devices (never AUTO)
    driver_version: str  # "" when the mode needs none and none was found
    gpus: list[Gpu]
    modules: set[str] | None  # NVIDIA modules loaded; None when /proc/modules is unreadable
    common: Found  # what the mode's discoverers found for the common edits
    gpu_nodes: dict[int, NodeInfo]  # by minor
    drm: dict[str, DrmInfo]  # by PCI bus id
    mig_minors: procfs.MigMinors | None
    caps_major: int | None
    warnings: list[str] = field(default_factory=list)
    faulty: list[str] = field(default_factory=list)  # GPUs NVML could not describe, left out: "GPU 3: ..."
    cuda_version: int = 0  # NVML's CUDA driver version, 13000 for 13.0; 0: no NVML, or it gave none


def discover(
    roots: Roots,
    mode: Mode,
    *,
    mps_pipe_dir: str = driverfiles.MPS_PIPE_DIR,
    csv: CsvSource | None = None,
    nvml: NvmlQuery | None = None,
) -> NodeFacts:
    """The node's facts for ``mode``; ``csv``: the CSV files of ``--mode csv`` (default: L4T's);
    ``nvml``: a query the caller began first thing (its child importing pynvml meanwhile), which this
    asks, or closes when the mode needs no NVML."""
    try:
        return _discover(roots, mode, mps_pipe_dir, csv, nvml)
    finally:
        if nvml is not None:
            nvml.close()


def _discover(
    roots: Roots, mode: Mode, mps_pipe_dir: str, csv: CsvSource | None, nvml: NvmlQuery | None
) -> NodeFacts:
    warnings: list[str] = []
    faulty: list[str] = []
    modules = procfs.read_loaded_modules(roots)
    majors = procfs.read_char_majors(roots)
    candidates: list[str] | None = None
    if mode is Mode.AUTO:
        mode, candidates = _platform_mode(roots, warnings)
    recipe = MODES[mode]
    host_driver = recipe.driver is DriverSource.HOST
    if candidates is None:
        # Only the modes that look for the driver's libraries read the ld cache (and warn about it).
        candidates = candidate_dirs(roots, warnings) if host_driver else []
    if host_driver and (moved := in_driver_container(roots, candidates, warnings)) is not None:
        roots, candidates = moved
    in_procfs = recipe.driver in (DriverSource.HOST, DriverSource.PROCFS_OPTIONAL)
    version = (procfs.read_driver_version(roots) if in_procfs else None) or ""
    uses_nvml = recipe.gpus in NVML_SOURCES
    # NVML answers from a child (its import and nvmlInit are the slowest part on a real node) while
    # this process finds the driver's files, which need the version procfs usually gives. No NVML to
    # load (none, or none root's alone: cdictk.node.libchoice) is an absent one.
    query: NvmlQuery | NvmlError | None = None
    if uses_nvml:
        try:
            library = nvml_library(roots.driver)
        except LibraryError as exc:
            query = NvmlError(exc.problem.reason, library=NVML, absent=True)
        else:
            query = nvml or NvmlQuery()
            query.ask(library)
    try:
        early = _early_common(
            recipe.common, Context(roots, version, modules, candidates, mps_pipe_dir, csv=csv)
        )
        gpus: list[Gpu] = []
        used = mode
        cuda = 0
        if query is not None:
            gpus, nvml_version, cuda, used = _gpus_from_nvml(recipe.gpus, query, warnings, faulty)
            version = version or nvml_version or ""
    finally:
        if isinstance(query, NvmlQuery):
            query.close()
    if recipe.gpus is GpuSource.PROCFS or used is Mode.PROCFS:
        gpus, used = _full_gpus_from_procfs(roots, warnings), Mode.PROCFS
    if host_driver:
        version = version or version_from_libraries(roots, candidates) or ""
    elif recipe.driver is DriverSource.WSL_STORE:
        version = wsl.driver_version(roots, warnings)
    if host_driver and not version:
        raise DiscoveryError(
            "no NVIDIA driver found: no /proc/driver/nvidia/version, no NVML and no "
            f"libcuda.so.<version> under {roots.driver}" + module_hint(modules)
        )
    if recipe.gpus is not GpuSource.NONE and not gpus:
        lost = f"; NVML could not describe {'; '.join(faulty)}" if faulty else ""
        raise DiscoveryError(f"no NVIDIA GPUs found ({used.value}){lost}" + module_hint(modules))

    gpu_nodes = {}
    for gpu in gpus:
        node = devnodes.gpu_node(roots, gpu.minor)
        if node is None:
            warnings.append(f"GPU {gpu.index} ({gpu.uuid}): /dev/nvidia{gpu.minor} is missing; GPU left out")
        else:
            gpu_nodes[gpu.minor] = node
    context = Context(roots, version, modules, candidates, mps_pipe_dir, csv=csv)
    common = (
        early[1] if early is not None and early[0] == version else discover_common(recipe.common, context)
    )
    warnings += common.warnings

    mig_gpus = {gpu.minor for gpu in gpus if gpu.mig_enabled}
    return NodeFacts(
        roots=roots,
        mode=used,
        driver_version=version,
        gpus=gpus,
        modules=modules,
        common=common,
        gpu_nodes=gpu_nodes,
        drm={gpu.bus_id: drm_for_gpu(roots, gpu.bus_id) for gpu in gpus},
        mig_minors=procfs.read_mig_minors(roots, mig_gpus) if mig_gpus else None,
        caps_major=majors.get("nvidia-caps"),
        warnings=warnings,
        faulty=faulty,
        cuda_version=cuda,
    )


def _platform_mode(roots: Roots, warnings: list[str]) -> tuple[Mode, list[str] | None]:
    """What ``--mode auto`` means on this node (see :mod:`cdictk.node.platform`), and the library
    directories when they had to be read to decide.

    A Jetson is generated from its CSV files when it has no NVML, or when NVML reports its integrated
    GPU (an Orin's "(nvgpu)", a Thor), as NVIDIA decides; one whose NVML reports discrete GPUs alone
    is generated with NVML, with a warning, since that is a guess."""

    found = platform.detect(roots)
    if found is not Platform.TEGRA:
        return (Mode.WSL if found is Platform.WSL else Mode.AUTO), None
    candidates = candidate_dirs(roots, warnings)
    try:
        library = nvml_library(roots.driver)
    except LibraryError as exc:
        if exc.refused:
            warnings.append(f"a Jetson (Tegra) whose NVML is refused ({exc}): generating from its CSV files")
        return Mode.CSV, candidates
    try:
        gpus = query_nvml(library).gpus
    except NvmlError as exc:
        warnings.append(f"a Jetson (Tegra) whose NVML fails ({exc}): generating from its CSV files")
        return Mode.CSV, candidates
    if not gpus or any(platform.is_integrated_gpu(gpu.name) for gpu in gpus):
        return Mode.CSV, candidates
    warnings.append(
        "a Jetson (Tegra) whose NVML reports discrete GPUs only: generating for them with NVML; "
        "--mode csv writes its integrated GPU from the CSV files"
    )
    return Mode.AUTO, candidates


def _early_common(names: tuple[str, ...], context: Context) -> tuple[str, Found] | None:
    """The common edits found while NVML answers, with the version they were found for; None when
    procfs gave no version (they need it) or they failed: they are looked for again, in their turn,
    after the checks of the driver and the GPUs, whose errors come first."""
    if not context.version:
        return None
    try:
        return context.version, discover_common(names, context)
    except CdictkError:
        return None


def _gpus_from_nvml(
    source: GpuSource, query: NvmlQuery | NvmlError, warnings: list[str], faulty: list[str]
) -> tuple[list[Gpu], str | None, int, Mode]:
    """The GPUs NVML reports, its driver and CUDA versions (``query``: its query under way, or why
    there is no library to load).
    procfs stands in only where there is no NVML at all, or none cdictk may load (not root's alone):
    an NVML that failed, hung or left a GPU out is never papered over with procfs, which knows nothing
    of MIG and would advertise a GPU in MIG mode as a full GPU."""
    try:
        if isinstance(query, NvmlError):
            raise query
        answer = query.answer()
    except NvmlError as exc:
        if source is GpuSource.NVML or not exc.absent:
            raise
        warnings.append(f"{exc}; falling back to /proc/driver/nvidia/gpus (full GPUs only, no MIG)")
        return [], None, 0, Mode.PROCFS
    for line in answer.left_out:
        faulty.append(line)
        warnings.append(f"{line}: NVML cannot describe it; left out of the spec (the other GPUs are kept)")
    return answer.gpus, answer.version, answer.cuda_version, Mode.NVML


def _full_gpus_from_procfs(roots: Roots, warnings: list[str]) -> list[Gpu]:
    """The GPUs procfs lists, less those in MIG mode: procfs knows no MIG device, and a GPU in MIG
    mode given as a full GPU would fail every container given it."""
    gpus = []
    for gpu in gpus_from_procfs(procfs.read_proc_gpus(roots)):
        if procfs.has_gpu_instances(roots, gpu.minor):
            warnings.append(
                f"GPU {gpu.index} ({gpu.uuid or gpu.bus_id}) is in MIG mode, whose devices only NVML "
                "lists: left out (generate with NVML)"
            )
        else:
            gpus.append(gpu)
    return gpus


def module_hint(modules: set[str] | None) -> str:
    if modules is not None and "nvidia" not in modules:
        return "; the nvidia kernel module is not loaded (/proc/modules)"
    return ""
