"""``/proc/<pid>/mountinfo`` (proc(5)), parsed once for everyone who needs it: the ldconfig sandbox
checks which mounts it can see, the prestart hook finds the cgroup hierarchies. Standard library only.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.fsutil import read_fd

# A Kubernetes node has thousands of mounts; each line is a few hundred bytes.
MAX_MOUNTINFO = 16 << 20


class Mount:
    """One line of mountinfo: the fields cdictk uses."""

    __slots__ = ("dev", "fstype", "mountpoint", "root", "super_options")

    def __init__(self, dev: int, root: str, mountpoint: str, fstype: str, super_options: str) -> None:
        self.dev = dev
        self.root = root
        self.mountpoint = mountpoint
        self.fstype = fstype
        self.super_options = super_options


def read(fd: int) -> list[Mount]:
    """The mounts in the mountinfo file open at ``fd``; ValueError when it is malformed or too large."""
    data = read_fd(fd, MAX_MOUNTINFO)
    if data is None:
        raise ValueError(f"mountinfo: larger than {MAX_MOUNTINFO} bytes")
    return parse(data)


def parse(data: bytes) -> list[Mount]:
    """The mounts of a mountinfo file, in its order (a later mount on the same point covers an earlier)."""
    mounts: list[Mount] = []
    for raw in data.splitlines():
        fields = raw.split(b" ")
        try:
            separator = fields.index(b"-", 6)
            major, minor = (int(n) for n in fields[2].split(b":"))
            fstype, _source, super_options = fields[separator + 1 : separator + 4]
            dev = os.makedev(major, minor)
        except (ValueError, OverflowError):
            raise ValueError(f"mountinfo: unexpected line {os.fsdecode(raw[:80])!r}") from None
        root, mountpoint = unescape(fields[3]), unescape(fields[4])
        mounts.append(Mount(dev, root, mountpoint, os.fsdecode(fstype), os.fsdecode(super_options)))
    return mounts


def unescape(field: bytes) -> str:
    r"""A path field: mountinfo writes space, tab, newline and backslash in paths as \ooo octal escapes."""
    if b"\\" not in field:
        return os.fsdecode(field)
    out = bytearray()
    i = 0
    while i < len(field):
        digits = field[i + 1 : i + 4]
        if field[i] == 0x5C and len(digits) == 3 and all(0x30 <= c <= 0x37 for c in digits):
            out.append(int(digits, 8) & 0xFF)
            i += 4
        else:
            out.append(field[i])
            i += 1
    return os.fsdecode(bytes(out))
