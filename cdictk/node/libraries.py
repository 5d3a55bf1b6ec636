"""The driver's user-space libraries: which directories hold them, which files, and their links.

A driver library directory is any directory, from the driver root's ``ld.so.cache`` or the usual
library directories, that holds a ``lib*.so.<driver version>`` file. In each of them (and ``vdpau/``)
the libraries are the regular files named ``lib*.so.<driver version>`` plus NVIDIA's libraries that do
not carry the driver version (``libnvidia-api.so.1``, ``libnvidia-egl-wayland.so.1.1.13``): NVIDIA's
generator keys on the version suffix alone and misses those (its issues #1215 and #1908). A file whose
suffix is another driver's version (``.so.550.54.15``, left over from an upgrade) is never taken.
The links are the symlinks present on the host that resolve to one of those files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from cdictk.elflinks import read_soname
from cdictk.node.ldcachereader import LdCacheError, read_ld_cache
from cdictk.node.libchoice import LD_CACHE, USUAL_LIB_DIRS
from cdictk.sorting import natural_key
from cdictk.startpath.helpers.roots import Roots, join, resolve

# Subdirectories whose files belong to the driver too (VDPAU) or whose links point into it (GBM).
_LIBRARY_SUBDIRS = ("vdpau",)
_LINK_SUBDIRS = ("vdpau", "gbm")
_NVIDIA_UNVERSIONED = re.compile(r"lib(?:nvidia-[\w.+-]+?|\w+_nvidia)\.so((?:\.\d+)*)")
_LIBCUDA = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True, slots=True)
class DriverLibrary:
    path: str  # inside the driver root, symlinks resolved
    soname: str | None


@dataclass(slots=True)
class LibraryScan:
    libraries: list[DriverLibrary] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)  # driver library directories, inside the root
    links: list[tuple[str, str]] = field(default_factory=list)  # (target as written, link path)
    skipped: list[str] = field(default_factory=list)  # names a spec cannot carry (not UTF-8, "::")


def is_driver_library(name: str, version: str) -> bool:
    if name.startswith("lib") and name.endswith(".so." + version):
        return True
    match = _NVIDIA_UNVERSIONED.fullmatch(name)
    if match is None:
        return False
    # A three-digit major is a driver version (550.54.15): another driver's leftover, not ours.
    numbers = match.group(1).split(".")[1:]
    return not numbers or int(numbers[0]) < 100


def candidate_dirs(roots: Roots, warnings: list[str]) -> list[str]:
    """Library directories inside the driver root: the cache's (64-bit) ones, then the usual ones."""
    cache_path = roots.in_driver(LD_CACHE)
    dirs: list[str] = []
    try:
        entries = read_ld_cache(cache_path)
    except LdCacheError as exc:
        if not exc.missing:  # a missing cache is a driver tree's normal state: the usual dirs are searched
            warnings.append(f"{cache_path}: {exc}; searching the usual library directories instead")
        entries = []
    seen: set[str] = set()
    for directory in [os.path.dirname(entry.path) for entry in entries if entry.bits == 64] + list(
        USUAL_LIB_DIRS
    ):
        if directory in seen:
            continue
        seen.add(directory)
        real = resolve(roots.driver, directory)
        if real is not None and real not in dirs:
            dirs.append(real)
    return dirs


def usable_name(name: str) -> bool:
    """A name a spec can carry: valid UTF-8 (a CDI spec is text) and no "::" (the hooks' link separator)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "::" not in name


def _listing(roots: Roots, directory: str, skipped: list[str]) -> tuple[str, list[str], list[str]] | None:
    """``directory`` resolved inside the driver root, with the names of its regular files and symlinks."""
    real = resolve(roots.driver, directory)
    if real is None:
        return None
    files, links = [], []
    try:
        with os.scandir(join(roots.driver, real)) as scan:
            for entry in scan:
                if not usable_name(entry.name):
                    shown = os.path.join(real, entry.name).encode("utf-8", "backslashreplace")
                    skipped.append(shown.decode())
                elif entry.is_symlink():
                    links.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.name)
    except OSError:
        return None
    return real, sorted(files), sorted(links)


def find_driver_libraries(roots: Roots, version: str, candidates: list[str]) -> LibraryScan:
    """The libraries of driver ``version`` in ``candidates`` (from ``candidate_dirs``) and their links."""
    scan = LibraryScan()
    for directory in candidates:
        listing = _listing(roots, directory, [])
        if listing and any(name.startswith("lib") and name.endswith(".so." + version) for name in listing[1]):
            scan.dirs.append(listing[0])
    paths: list[str] = []
    for directory in scan.dirs:
        for sub in ("", *_LIBRARY_SUBDIRS):
            listing = _listing(roots, f"{directory}/{sub}" if sub else directory, scan.skipped)
            if listing is not None:
                where, names, _ = listing
                paths.extend(f"{where}/{name}" for name in names if is_driver_library(name, version))
    # A subdirectory (vdpau/) can be a library directory of its own too.
    paths = list(dict.fromkeys(paths))
    scan.libraries = [DriverLibrary(path, _soname(join(roots.driver, path))) for path in paths]
    scan.links = library_links(roots, scan.dirs, scan.libraries)
    scan.skipped = sorted(set(scan.skipped))
    return scan


def _soname(path: str) -> str | None:
    """The SONAME when it can name a link next to the library (no "/", not "." or "..")."""
    soname = read_soname(path)
    if soname is None or "/" in soname or soname in (".", "..") or not usable_name(soname):
        return None
    return soname


def library_links(roots: Roots, dirs: list[str], libraries: list[DriverLibrary]) -> list[tuple[str, str]]:
    """Host symlinks to the libraries, plus each library's SONAME link where the host lacks it, and
    the GBM and indirect-GLX names the GL loaders look for (:data:`_LOADER_LINKS`).

    The SONAME link is what the dynamic loader opens (``libcuda.so.1``); ldconfig would make it too, but
    a container should not depend on ldconfig having run to find its driver. When several files share
    a missing SONAME link, the newest version (natural order of the names) gets it.
    """
    wanted = {library.path for library in libraries}
    links: dict[str, str] = {}
    for directory in dirs:
        for sub in ("", *_LINK_SUBDIRS):
            listing = _listing(roots, f"{directory}/{sub}" if sub else directory, [])
            if listing is None:
                continue
            where, _, names = listing
            for name in names:
                link = f"{where}/{name}"
                if resolve(roots.driver, link) in wanted:
                    target = os.readlink(join(roots.driver, link))
                    if usable_name(target):
                        links[link] = target
    for library in sorted(libraries, key=lambda library: natural_key(library.path)):
        directory, base = os.path.split(library.path)
        soname_link = f"{directory}/{library.soname}"
        if library.soname and library.soname != base and not os.path.lexists(join(roots.driver, soname_link)):
            links[soname_link] = base  # in natural order, so the newest version sets it last
        for prefix, name, target in _LOADER_LINKS:
            link = f"{directory}/{name}"
            if (
                base.startswith(prefix)
                and link not in links
                and not os.path.lexists(join(roots.driver, link))
            ):
                links[link] = target or base
    return sorted((target, link) for link, target in links.items())


# Links that the GL loaders look up by a name of their own, made as NVIDIA makes them when the host
# lacks them: (the library's name prefix, the link beside it, its target; "" for the library itself).
# GBM loads gbm/<drm driver>_gbm.so; GLVND's indirect GLX loads libGLX_indirect.so.0.
_LOADER_LINKS = (
    ("libnvidia-allocator.so.", "gbm/nvidia-drm_gbm.so", "../libnvidia-allocator.so.1"),
    ("libGLX_nvidia.so.", "libGLX_indirect.so.0", ""),
)


def version_from_libraries(roots: Roots, dirs: list[str]) -> str | None:
    """The driver version from ``libcuda.so.<version>`` (the last resort).

    The file ``libcuda.so.1`` points at is the driver in use; without that link, the newest version
    found (an upgrade can leave the old driver's files behind).
    """
    found: list[str] = []
    for directory in dirs:
        current = resolve(roots.driver, f"{directory}/libcuda.so.1")
        if current is not None and (match := _LIBCUDA.fullmatch(os.path.basename(current))):
            return match.group(1)
        listing = _listing(roots, directory, [])
        if listing is not None:
            found += [match.group(1) for name in listing[1] if (match := _LIBCUDA.fullmatch(name))]
    return max(found, key=natural_key, default=None)
