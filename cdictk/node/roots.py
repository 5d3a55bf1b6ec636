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

from cdictk.record import record

_MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup


@record(frozen=True)
class Roots:
    driver: str = "/"
    dev: str = "/"
    proc: str = "/proc"
    sys: str = "/sys"

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
