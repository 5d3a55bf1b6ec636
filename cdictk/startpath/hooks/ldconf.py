"""ld.so.conf as glibc's ldconfig reads it: its directory lines in ldconfig's order, through ``include``
lines and the glob(3) patterns they name.

One walk serves the cache writer (:mod:`cdictk.startpath.hooks.ldscan` gets the directories) and the check
that runs before the host's ldconfig (:mod:`cdictk.startpath.hooks.ldcache`): every file is resolved inside
the rootfs, read only from the image's own mount and only when it is a regular file, and a FIFO, socket or
device node that an ``include`` leads to is refused outright (ldconfig would block on a FIFO, and a device
node should not be opened). A line is read as ldconfig reads it: cut at a NUL byte and at ``#``, leading
blanks dropped; ``include`` takes blank-separated patterns, a relative one from the including file's
directory; ``hwcap`` lines are ignored (2.31 and older define hwcap names with them: left to ldconfig);
anything else is a directory.

What the writer cannot stand in for is recorded in :attr:`Conf.unsupported` and the walk goes on, so
that the check still sees every file: an include cycle (ldconfig recurses until it runs out of file
descriptors, and its result depends on how many it has), a pattern with wildcards in a directory name,
brackets or backslashes, a file too large or on another mount, and the caps below. A file included a
second time, not from within itself, adds no directory ldconfig has not listed already, and is skipped.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs

MAX_FILES = 256  # configuration files read through includes; a real image has a few dozen
MAX_SIZE = 64 << 10  # per file
# Lines, files and directory entries looked at in all: past this the walk stops (the writer leaves the
# image to ldconfig, whose deadline bounds what is left).
BUDGET = 4096
_BLANKS = b" \t\n\v\f\r"  # C's isspace
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


class Conf:
    """What a walk found (a plain class: dataclasses is too heavy an import for the hook)."""

    __slots__ = ("dirs", "unsupported")

    def __init__(self) -> None:
        self.dirs: list[str] = []  # directory lines, in ldconfig's order, as written
        self.unsupported: str | None = None  # the first thing only ldconfig itself does


def read(rootfs: Rootfs, path: str, *, hwcap_lines: bool = False) -> Conf:
    """The directories ``path`` (ld.so.conf) and its includes name.

    ``hwcap_lines``: the image's ldconfig gives ``hwcap`` lines a meaning (glibc 2.31 and older).
    Raises :class:`HookError` for a configuration file that is a FIFO, socket or device node (or an
    ld.so.conf that is a directory, which would hide every drop-in, the hook's own included).
    """
    walk = _Walk(rootfs, hwcap_lines)
    walk.file(path, "")
    return walk.conf


class _Walk:
    __slots__ = ("budget", "conf", "done", "files", "hwcap_lines", "reading", "rootfs")

    def __init__(self, rootfs: Rootfs, hwcap_lines: bool) -> None:
        self.rootfs = rootfs
        self.hwcap_lines = hwcap_lines
        self.conf = Conf()
        self.budget = BUDGET
        self.files = 0
        self.reading: list[tuple[int, int]] = []  # the include stack
        self.done: set[tuple[int, int]] = set()

    def unsupported(self, why: str) -> None:
        if self.conf.unsupported is None:
            self.conf.unsupported = why

    def file(self, path: str, included_by: str) -> None:
        if self.budget <= 0 or self.files >= MAX_FILES:
            self.unsupported(f"more than {MAX_FILES} configuration files or {BUDGET} lines and entries")
            return
        self.files += 1
        self.budget -= 1
        try:
            fd = self.rootfs.open(path)
        except OSError:
            return  # ldconfig skips what it cannot open
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        key = (info.st_dev, info.st_ino)
        if stat.S_ISDIR(info.st_mode) and included_by:
            return  # an included directory gives ldconfig nothing to read
        if not stat.S_ISREG(info.st_mode):
            where = f" (included by {included_by})" if included_by else ""
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a file")
            raise HookError(f"{path} in the container is {kind}, not a regular file{where}")
        if key in self.reading:
            self.unsupported(f"{path} includes itself")
            return
        if key in self.done:
            return
        try:
            # Only from the image's own mount: an include into procfs must not make root read a host
            # kernel file (reading /proc/kmsg consumes the kernel log).
            data = self.rootfs.read_regular(path, MAX_SIZE, same_mount=True)
        except OSError as exc:
            self.unsupported(f"{path}: {exc.strerror}")
            return
        self.reading.append(key)
        lines = data.split(b"\n")
        self.budget -= len(lines)
        for raw in lines:
            if self.budget <= 0:
                self.unsupported(f"more than {BUDGET} configuration lines and entries")
                break
            self.line(path, raw)
        self.reading.pop()
        self.done.add(key)

    def line(self, path: str, raw: bytes) -> None:
        line = raw.partition(b"\0")[0].partition(b"#")[0].lstrip(_BLANKS)
        if not line:
            return
        if line[:7] == b"include" and line[7:8] in (b" ", b"\t"):
            for token in line[8:].replace(b"\t", b" ").split(b" "):
                if token:
                    self.include(path, os.fsdecode(token))
        elif line[:5].lower() == b"hwcap" and line[5:6] in (b" ", b"\t"):
            if self.hwcap_lines:
                self.unsupported(f"{path}: a hwcap line ({line.decode(errors='replace')})")
        else:
            self.conf.dirs.append(os.fsdecode(line))

    def include(self, path: str, pattern: str) -> None:
        if not pattern.startswith("/"):
            pattern = f"{os.path.dirname(path)}/{pattern}"
        folder, _, name = pattern.rpartition("/")
        if "[" in pattern or "\\" in pattern or "*" in folder or "?" in folder:
            self.unsupported(f"{path}: include pattern {pattern!r}")
            return
        for match in self.glob(folder, name):
            self.file(match, path)

    def glob(self, folder: str, name: str) -> list[str]:
        """glob(3)'s matches for a pattern with wildcards in its last component only, in glob's order
        (the C locale's: by bytes)."""
        if "*" not in name and "?" not in name:
            return [f"{folder}/{name}"]
        try:
            fd = self.rootfs.open(folder or "/", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []
        found = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    self.budget -= 1
                    if self.budget <= 0:
                        self.unsupported(f"more than {BUDGET} configuration lines and entries")
                        break
                    if matches(entry.name, name):
                        found.append(f"{folder}/{entry.name}")
        finally:
            os.close(fd)
        return sorted(found, key=os.fsencode)


def matches(name: str, pattern: str) -> bool:
    """fnmatch(3) for '*' and '?' as glob(3) calls it: a leading '.' only matches itself.

    The fnmatch module would import re on every container start.
    """
    if name.startswith(".") and not pattern.startswith("."):
        return False
    n = p = 0
    star = retry = -1
    while n < len(name):
        if p < len(pattern) and pattern[p] == "*":
            star, retry = p, n
            p += 1
        elif p < len(pattern) and pattern[p] in ("?", name[n]):
            n += 1
            p += 1
        elif star >= 0:
            # Let the last '*' take one more character and try the rest again.
            retry += 1
            n, p = retry, star + 1
        else:
            return False
    return pattern[p:].strip("*") == ""
