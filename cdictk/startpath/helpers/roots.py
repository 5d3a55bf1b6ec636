"""Where a node's facts live: the driver root, the dev root, procfs and sysfs.

Discovery never reads ``/proc`` or ``/usr/lib`` directly; it asks ``Roots`` where they are, so the same
code scans the host, a containerised driver (``/run/nvidia/driver``) or a fake node built by the tests.
Paths inside a root ("container paths") are what a spec puts in the container; host paths are those
joined to their root.
"""

from __future__ import annotations

import os
import stat
from collections import deque

from cdictk.startpath.helpers.fsutil import read_fd

_MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup
MAX_PROC_BYTES = 1 << 20
NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")


class Roots:
    """The four roots, compared and hashed by value.

    A plain class rather than a dataclass: the shim builds one on every create on a node without a
    spec on disk, to compare the node's fingerprint, and the dataclasses module's import would be
    most of that create's cost (``make bench-shim``, "node's spec kept").
    """

    __slots__ = ("dev", "driver", "proc", "sys")

    def __init__(self, driver: str = "/", dev: str = "/", proc: str = "/proc", sys: str = "/sys") -> None:
        self.driver = driver
        self.dev = dev
        self.proc = proc
        self.sys = sys

    def _key(self) -> tuple[str, str, str, str]:
        return (self.driver, self.dev, self.proc, self.sys)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Roots):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Roots(driver={self.driver!r}, dev={self.dev!r}, proc={self.proc!r}, sys={self.sys!r})"

    def as_dict(self) -> dict[str, str]:
        return {"driver": self.driver, "dev": self.dev, "proc": self.proc, "sys": self.sys}

    def with_driver(self, driver: str) -> Roots:
        """The same roots with another driver root."""
        return Roots(driver, self.dev, self.proc, self.sys)

    @classmethod
    def from_options(
        cls, driver: str = "/", dev: str | None = None, proc: str = "/proc", sys: str = "/sys"
    ) -> Roots:
        """The roots a command line gives: absolute (a spec's host paths must not depend on the working
        directory), the dev root defaulting to the driver root."""
        driver = os.path.abspath(driver)
        return cls(
            driver, os.path.abspath(dev) if dev else driver, os.path.abspath(proc), os.path.abspath(sys)
        )

    def in_driver(self, path: str) -> str:
        """The host path of ``path`` (absolute, inside the driver root)."""
        return join(self.driver, path)

    def in_dev(self, path: str) -> str:
        return join(self.dev, path)

    def in_proc(self, path: str) -> str:
        """``path`` relative to procfs, e.g. ``devices`` or ``driver/nvidia/version``."""
        return os.path.join(self.proc, path)

    def in_sys(self, path: str) -> str:
        return os.path.join(self.sys, path)


def join(root: str, path: str) -> str:
    """``root`` + absolute ``path``; ``/`` + path is path itself."""
    base = root.rstrip("/")
    return base + "/" + path.lstrip("/") if base else "/" + path.lstrip("/")


def resolve(root: str, path: str, followed: list[str] | None = None) -> str | None:
    """Follow symlinks in ``path`` as if ``root`` were ``/``; the final path inside ``root``, or None.

    A driver root is another system's tree: an absolute link target such as
    ``/usr/lib/x86_64-linux-gnu/libcuda.so.1`` means that path under the root, never on this host, and
    ``..`` stops at the root. None for a dangling link, a loop or a missing component. ``followed``
    gets the host path of each link followed, whose owners decide what the result is.
    """
    pending = deque(part for part in path.split("/") if part)
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.popleft()
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        host = join(root, "/".join([*resolved, part]))
        try:
            info = os.lstat(host)
        except OSError:
            return None
        if not stat.S_ISLNK(info.st_mode):
            resolved.append(part)
            continue
        links += 1
        if links > _MAX_LINKS:
            return None
        if followed is not None:
            followed.append(host)
        try:
            target = os.readlink(host)
        except OSError:
            return None
        if target.startswith("/"):
            resolved.clear()
        pending.extendleft(reversed([p for p in target.split("/") if p]))
    return "/" + "/".join(resolved)


def read_text(path: str) -> str | None:
    """The file's text, or None when it is missing, unreadable or not a regular file.

    procfs and sysfs files report no useful size, so the read is capped instead; O_NONBLOCK and the
    type check keep a FIFO planted in a fake or hostile root from hanging discovery.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = read_fd(fd, MAX_PROC_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if data is None else data.decode("utf-8", "replace")
