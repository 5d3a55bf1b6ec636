"""The discoverers of a spec's common edits: each finds one kind of thing under the node's roots.

Every discoverer takes the :class:`Context` (the roots, the driver version, the loaded modules, the
library directories) and returns a :class:`Found`: device nodes, driver libraries, other files to mount,
links to make, and what it looked for and did not find. A generate mode names the discoverers it wants
(:data:`cdictk.node.modes.MODES`); their results are merged in that order. A new discoverer is a
function here and a row in :data:`COMMON`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from cdictk.elflinks import read_soname
from cdictk.node import csvfiles, devnodes, driverfiles, othernodes, wsl
from cdictk.node.csvfiles import CsvEntries, CsvSource
from cdictk.node.devnodes import NodeInfo
from cdictk.node.driverfiles import DriverFile, FileKind
from cdictk.node.libraries import (
    DriverLibrary,
    LibraryScan,
    find_driver_libraries,
    library_links,
    usable_name,
)
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots, join, resolve


@dataclass(slots=True)
class Found:
    nodes: list[NodeInfo] = field(default_factory=list)
    # Nodes for the mode's devices rather than the common edits (a Jetson's, from its CSV files).
    device_nodes: list[NodeInfo] = field(default_factory=list)
    libraries: list[DriverLibrary] = field(default_factory=list)
    files: list[DriverFile] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (target as written, link path)
    missing: list[str] = field(default_factory=list)  # optional things looked for and not found
    warnings: list[str] = field(default_factory=list)

    def add(self, other: Found) -> None:
        self.nodes += other.nodes
        self.device_nodes += other.device_nodes
        self.libraries += other.libraries
        self.files += other.files
        self.links += other.links
        self.missing += other.missing
        self.warnings += other.warnings


class Context:
    """What every discoverer may ask; the library scan is made once, for whichever asks first."""

    def __init__(
        self,
        roots: Roots,
        version: str,
        modules: set[str] | None,
        candidates: list[str],
        mps_pipe_dir: str = driverfiles.MPS_PIPE_DIR,
        *,
        csv: CsvSource | None = None,
    ) -> None:
        self.roots = roots
        self.version = version
        self.modules = modules  # None when /proc/modules is unreadable
        self.candidates = candidates  # library directories, inside the driver root
        self.mps_pipe_dir = mps_pipe_dir
        self.csv = csv or CsvSource()
        self._scan: LibraryScan | None = None
        self._csv: CsvEntries | None = None

    def libraries(self) -> LibraryScan:
        if self._scan is None:
            self._scan = find_driver_libraries(self.roots, self.version, self.candidates)
        return self._scan

    def csv_entries(self) -> CsvEntries:
        if self._csv is None:
            self._csv = csvfiles.read_entries(self.roots, self.csv)
        return self._csv


def control_nodes(context: Context) -> Found:
    found = Found(nodes=devnodes.control_nodes(context.roots))
    present = {node.path for node in found.nodes}
    for path, module in (
        ("/dev/nvidiactl", "nvidia"),
        ("/dev/nvidia-uvm", "nvidia_uvm"),
        ("/dev/nvidia-uvm-tools", "nvidia_uvm"),
    ):
        if path not in present:
            modules = context.modules
            reason = (
                f"; the {module} module is not loaded"
                if modules is not None and module not in modules
                else ""
            )
            found.warnings.append(f"{path} is missing{reason}: CUDA in containers will fail without it")
    return found


def driver_libraries(context: Context) -> Found:
    scan = context.libraries()
    found = Found(libraries=list(scan.libraries), links=list(scan.links))
    names = {os.path.basename(library.path) for library in scan.libraries}
    libcuda = f"libcuda.so.{context.version}"
    if libcuda not in names:
        found.warnings.append(
            f"{libcuda} not found under {context.roots.driver}: CUDA in containers will fail"
        )
    if scan.skipped:
        found.warnings.append(
            f"left out, names a spec cannot carry (not UTF-8, or '::'): {', '.join(scan.skipped)}"
        )
    return found


def _files(find: Callable[[driverfiles.Found], None]) -> Found:
    result = driverfiles.Found()
    find(result)
    return Found(files=result.files, links=result.links, missing=result.missing)


def binaries(context: Context) -> Found:
    dirs = context.libraries().dirs
    return _files(lambda found: driverfiles.find_binaries(context.roots, found, dirs))


def firmware(context: Context) -> Found:
    dirs = context.libraries().dirs
    return _files(lambda found: driverfiles.find_firmware(context.roots, context.version, found, dirs))


def ipc(context: Context) -> Found:
    return _files(lambda found: driverfiles.find_ipc(context.roots, found, context.mps_pipe_dir))


def configs(context: Context) -> Found:
    dirs = context.libraries().dirs
    return _files(lambda found: driverfiles.find_configs(context.roots, found, dirs))


def xorg_modules(context: Context) -> Found:
    dirs = context.libraries().dirs
    return _files(lambda found: driverfiles.find_xorg_modules(context.roots, context.version, dirs, found))


def wsl_driver(context: Context) -> Found:
    """libdxcore.so and the driver store's files; the store's nvidia-smi linked from /usr/bin."""
    found = wsl.find_driver(context.roots)
    if found is None:
        raise CdictkError(
            "",
            "",
            f"no NVIDIA driver store: no {wsl.LIBCUDA} in {context.roots.in_driver(wsl.DRIVERS)}/*/ "
            "(is the Windows NVIDIA driver installed?)",
        )
    roots = context.roots
    return Found(
        libraries=[DriverLibrary(path, None) for path in found.libraries],
        files=[DriverFile(path, join(roots.driver, path), FileKind.PLATFORM) for path in found.files],
        links=found.links,
        missing=found.missing,
        warnings=found.warnings,
    )


def csv_files(context: Context) -> Found:
    """What a Jetson's CSV files list: libraries and other files mounted, their symlinks made, and
    the dev entries' nodes for the device."""
    roots = context.roots
    read = context.csv_entries()
    nodes, absent_nodes = csvfiles.device_nodes(roots, read.entries)
    found = csvfiles.find_files(roots, read.entries, context.csv.ignore_patterns)
    result = Found(device_nodes=nodes)
    result.missing += [f"{path} (CSV file)" for path in read.absent] + absent_nodes + found.missing
    for path, host, is_dir in found.files:
        if not is_dir and _LIBRARY.fullmatch(os.path.basename(path)):
            soname = read_soname(host)
            usable = (
                soname is not None and "/" not in soname and soname not in (".", "..") and usable_name(soname)
            )
            result.libraries.append(DriverLibrary(path, soname if usable else None))
        else:
            result.files.append(DriverFile(path, host, FileKind.PLATFORM))
    # The links the CSV files name, then those a GPU host's libraries get too: the host's links to
    # them, a SONAME link the host lacks (libcuda.so.1), GL loader names. The CSV's own come first.
    dirs = sorted({os.path.dirname(library.path) for library in result.libraries})
    named = {link for _, link in found.links}
    result.links = found.links + [
        (target, link) for target, link in library_links(roots, dirs, result.libraries) if link not in named
    ]
    return result


def gds_files(context: Context) -> Found:
    """udev's database (cuFile reads it to find the NVMe devices) and /etc/cufile.json, only where
    nvidia-fs nodes exist: without them GDS is not there to configure."""
    roots = context.roots
    if not othernodes.matching_nodes(roots, othernodes.GATED["gds"]):
        return Found()
    found = Found()
    for path, is_dir in (("/run/udev", True), ("/etc/cufile.json", False)):
        real = resolve(roots.driver, path)
        host = join(roots.driver, real) if real else ""
        kind = stat.S_ISDIR if is_dir else stat.S_ISREG
        if real is not None and kind(_lstat_mode(host)):
            found.files.append(DriverFile(real, host, FileKind.PLATFORM))
        else:
            found.missing.append(path)
    return found


def _lstat_mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


_LIBRARY = re.compile(r"lib.+\.so(\..*)?")  # what the ld cache hook's folders come from, as NVIDIA's


COMMON: dict[str, Callable[[Context], Found]] = {
    "control-nodes": control_nodes,
    "driver-libraries": driver_libraries,
    "binaries": binaries,
    "firmware": firmware,
    "ipc": ipc,
    "configs": configs,
    "xorg-modules": xorg_modules,
    "wsl-driver": wsl_driver,
    "csv-files": csv_files,
    "gds-files": gds_files,
}


def discover_common(names: tuple[str, ...], context: Context) -> Found:
    """What the discoverers ``names`` find, merged in that order; the optional things none of them
    found summed up in one warning."""
    found = Found()
    for name in names:
        found.add(COMMON[name](context))
    if found.missing:
        found.warnings.append("not found, left out (optional): " + ", ".join(found.missing))
    return found
