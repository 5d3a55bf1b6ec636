"""Start path: standard library only.

ld.so.conf as glibc's ldconfig reads it: ``include`` lines and the glob(3) patterns they name.

Shared by the check that runs before the host's ldconfig (:mod:`cdictk.hooks.ldcache`) and by the
cache writer that can stand in for it (:mod:`cdictk.hooks.ldscan`); both resolve every path inside the
rootfs.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.rootfs import Rootfs


def includes(path: str, lines: list[bytes]) -> list[str]:
    """The patterns of the file's ``include`` lines, parsed as glibc's ldconfig parses them."""
    folder = os.path.dirname(path)
    patterns = []
    for raw in lines:
        line = raw.partition(b"#")[0].lstrip()
        if line[:7] != b"include" or line[7:8] not in (b" ", b"\t"):
            continue
        for token in line[8:].replace(b"\t", b" ").split(b" "):
            if token:
                pattern = os.fsdecode(token)
                patterns.append(pattern if pattern.startswith("/") else f"{folder}/{pattern}")
    return patterns


def glob(rootfs: Rootfs, pattern: str, limit: int) -> tuple[list[str], int]:
    """glob(3)'s matches for ``pattern``, sorted as glob sorts them, and the directory entries read (at
    most ``limit``).

    Only wildcards ('*', '?') in the last component are expanded, the form every distribution uses;
    a pattern with others (in a directory name, brackets, escapes) matches nothing here.
    """
    folder, _, name = pattern.rpartition("/")
    if any(c in folder for c in "*?[\\") or any(c in name for c in "[\\"):
        return [], 0
    if "*" not in name and "?" not in name:
        return [pattern], 0
    try:
        fd = rootfs.open(folder or "/", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return [], 0
    found = []
    scanned = 0
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                scanned += 1
                if matches(entry.name, name):
                    found.append(f"{folder}/{entry.name}")
                if scanned >= limit:
                    break
    finally:
        os.close(fd)
    return sorted(found, key=os.fsencode), scanned


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
