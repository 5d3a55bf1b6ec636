"""Jetson's CSV files: what an L4T host hands its containers (``--mode csv``).

NVIDIA's L4T packages list, in ``/etc/nvidia-container-runtime/host-files-for-container.d/*.csv``,
the device nodes, libraries, symlinks and directories a GPU container needs on a Jetson, one per line
as ``type, path`` with type ``dev``, ``lib``, ``sym`` or ``dir``. We read them strictly: a file is
capped in size and must be UTF-8, blank lines and ``#`` comments are allowed, and any other line that
is not ``type, /absolute/path`` is an error naming ``file:line`` (NVIDIA's parser skips it silently,
which hides a typo until a container lacks the file). A file that anyone but root could change
(:mod:`cdictk.startpath.trust`) is refused: it decides which host files every GPU container gets.

Paths of every type may hold globs, as NVIDIA's locators allow. ``dev`` paths become the device's
nodes, stat'ed under the dev root. ``lib`` and ``sym`` paths are followed inside the driver root:
every symlink on the way becomes a link the hook makes, the file at the end is mounted read-only
where it is. ``dir`` paths are mounted read-only. ``--csv.ignore-pattern`` leaves out the lib, sym
and dir entries it matches (``**/NAME`` matches the base name, anything else the whole path, as
NVIDIA's patterns do).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field
from enum import Enum

from cdictk.node.devnodes import NodeInfo, stat_node
from cdictk.node.libraries import usable_name
from cdictk.sorting import natural_key
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import read_capped
from cdictk.startpath.helpers.roots import Roots, join, resolve
from cdictk.startpath.trust import path_problem

DEFAULT_DIR = "/etc/nvidia-container-runtime/host-files-for-container.d"
DEFAULT_FILES = tuple(f"{DEFAULT_DIR}/{name}" for name in ("devices.csv", "drivers.csv", "l4t.csv"))
TEGRA_RELEASE = "/etc/nv_tegra_release"
MAX_CSV_BYTES = 1 << 20  # L4T's files are a few kilobytes; more is not a CSV file of theirs
_MAX_HOPS = 40  # the kernel's own limit on symlinks followed
_MAX_MATCHES = 4096  # per glob: far above any L4T file's, a bound on a hostile one
_GLOB = "*?["


class EntryType(Enum):
    DEV = "dev"
    LIB = "lib"
    SYM = "sym"
    DIR = "dir"


@dataclass(frozen=True, slots=True)
class CsvEntry:
    type: EntryType
    path: str  # absolute, in the driver root (dev: the dev root)


@dataclass(frozen=True, slots=True)
class CsvSource:
    """What ``--csv.file`` and ``--csv.ignore-pattern`` say. No files: the defaults, read under the
    driver root and skipped when missing; given files are host paths and must exist."""

    files: tuple[str, ...] = ()
    ignore_patterns: tuple[str, ...] = ()

    def paths(self, roots: Roots) -> list[tuple[str, bool]]:
        """(host path, must exist) of every file to read, in order."""
        if self.files:
            return [(os.path.abspath(path), True) for path in self.files]
        found = []
        for path in DEFAULT_FILES:
            real = resolve(roots.driver, path)
            found.append((join(roots.driver, real or path), False))
        return found


@dataclass(slots=True)
class CsvEntries:
    entries: list[CsvEntry] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # host paths of the files read
    absent: list[str] = field(default_factory=list)  # default files that are not there


@dataclass(slots=True)
class CsvFound:
    nodes: list[NodeInfo] = field(default_factory=list)
    files: list[tuple[str, str, bool]] = field(default_factory=list)  # (path, host path, is a directory)
    links: list[tuple[str, str]] = field(default_factory=list)  # (target as written, link path)
    missing: list[str] = field(default_factory=list)


def parse(text: str, name: str) -> list[CsvEntry]:
    """The entries of one CSV file's ``text``; ``name`` (the file) goes into error messages."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        kind, comma, path = (part.strip() for part in line.partition(","))
        where = f"{name}:{number}"
        if not comma:
            raise CdictkError(where, "", f"not 'type, path': {line!r}")
        try:
            entry_type = EntryType(kind)
        except ValueError as exc:
            raise CdictkError(where, "", f"unknown type {kind!r} (dev, lib, sym or dir)") from exc
        if not path.startswith("/") or "\0" in path or not usable_name(path):
            raise CdictkError(where, "", f"not an absolute path a spec can carry: {path!r}")
        entries.append(CsvEntry(entry_type, os.path.normpath(path)))
    return entries


def read_entries(roots: Roots, source: CsvSource) -> CsvEntries:
    """Every entry of the CSV files, in file order; CdictkError for a file given but missing, for a
    malformed file, and when no file is there at all."""

    result = CsvEntries()
    for path, required in source.paths(roots):
        if not required and not os.path.exists(path):
            result.absent.append(path)
            continue
        # Whoever can change the file chooses which host files every GPU container gets.
        problem = path_problem(path)
        if problem is not None:
            raise CdictkError(path, "", f"not trusted ({problem}): make it root's alone")
        data = read_capped(path, MAX_CSV_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CdictkError(path, "", f"not UTF-8 text (byte {exc.start})") from exc
        result.entries += parse(text, path)
        result.read.append(path)
    if not result.read:
        looked = ", ".join(result.absent)
        raise CdictkError("", "--csv.file", f"no CSV files (looked for {looked})")
    return result


def ignored(path: str, patterns: tuple[str, ...]) -> bool:

    for pattern in patterns:
        if pattern.startswith("**/"):
            if fnmatch.fnmatchcase(os.path.basename(path), pattern[3:]):
                return True
        elif fnmatch.fnmatchcase(path, pattern):
            return True
    return False


def device_nodes(roots: Roots, entries: list[CsvEntry]) -> tuple[list[NodeInfo], list[str]]:
    """The character devices the ``dev`` entries name (a glob matches every node), and the entries
    that matched none."""
    nodes: dict[str, NodeInfo] = {}
    missing: list[str] = []
    for entry in entries:
        if entry.type is not EntryType.DEV:
            continue
        found = [node for path in expand(roots.dev, entry.path) if (node := stat_node(roots, path))]
        for node in found:
            nodes.setdefault(node.path, node)
        if not found:
            missing.append(entry.path)
    return list(nodes.values()), missing


def expand(root: str, path: str) -> list[str]:
    """``path`` with its glob components (``*``, ``?``, ``[...]``) matched under ``root``, in natural
    order; a path without one as it is. Directories are followed inside ``root`` only."""
    if not any(char in path for char in _GLOB):
        return [path]

    matches = [""]
    for part in path.strip("/").split("/"):
        if not any(char in part for char in _GLOB):
            matches = [f"{match}/{part}" for match in matches]
            continue
        expanded = []
        for match in matches:
            real = resolve(root, match or "/")
            if real is None:
                continue
            try:
                names = sorted(os.listdir(join(root, real)), key=natural_key)
            except OSError:
                continue
            expanded += [f"{real.rstrip('/')}/{name}" for name in names if fnmatch.fnmatchcase(name, part)]
        matches = expanded[:_MAX_MATCHES]
    return [match for match in matches if usable_name(match)]


def find_files(roots: Roots, entries: list[CsvEntry], patterns: tuple[str, ...]) -> CsvFound:
    """What the lib, sym and dir entries name under the driver root, less the ignored ones, and
    ``/etc/nv_tegra_release`` (what L4T release the host runs, which CUDA images look at)."""
    found = CsvFound()
    mounted: set[str] = set()
    for entry in entries:
        if entry.type is EntryType.DEV:
            continue
        paths = [path for path in expand(roots.driver, entry.path) if not ignored(path, patterns)]
        if not paths and ignored(entry.path, patterns):
            continue
        matched = False
        for path in paths:
            links, final = follow(roots, path)
            mode = _mode(join(roots.driver, final)) if final else 0
            is_dir = stat.S_ISDIR(mode)
            if final is None or not (is_dir if entry.type is EntryType.DIR else stat.S_ISREG(mode)):
                continue  # and no links to what is not there
            matched = True
            found.links += [link for link in links if link not in found.links]
            if final not in mounted:
                mounted.add(final)
                found.files.append((final, join(roots.driver, final), is_dir))
        if not matched:
            found.missing.append(entry.path)
    if TEGRA_RELEASE not in mounted and stat.S_ISREG(_mode(roots.in_driver(TEGRA_RELEASE))):
        found.files.append((TEGRA_RELEASE, roots.in_driver(TEGRA_RELEASE), False))
    return found


def follow(roots: Roots, path: str) -> tuple[list[tuple[str, str]], str | None]:
    """The symlinks from ``path`` to what it names, as (target as written, link path inside the root),
    and that final path (None when dangling, looping or leaving names a spec cannot carry)."""
    links: list[tuple[str, str]] = []
    current = path
    for _ in range(_MAX_HOPS):
        directory = resolve(roots.driver, os.path.dirname(current))
        if directory is None:
            return links, None
        current = os.path.join(directory, os.path.basename(current))
        host = join(roots.driver, current)
        if not stat.S_ISLNK(_mode(host)):
            return links, current
        target = os.readlink(host)
        if not usable_name(target):
            return links, None
        links.append((target, current))
        current = os.path.normpath(os.path.join(directory, target))
    return links, None


def _mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0
