"""The test session's own mount namespace, cut off from the host's.

Many tests compare ``/proc/self/mountinfo`` before and after the code they drive, to catch a mount it
leaks. In the host's namespace any container starting beside the suite (a containerd pod, a second
pytest session) changes that table too, and the test fails for nothing. In a namespace of the
session's own, private from the host, the table changes only through what this session does, while a
leak into it shows as before. The host's mount table is left alone in turn: what the tests mount
(overlays, daemons' state) is never seen there.

Mount propagation is kept as the host had it: where the host's ``/`` is shared (systemd makes every
mount shared), the session's mounts are shared again, in peer groups of their own, so that code which
forgets to make its own namespace private still leaks into the session's table, where the tests see it.

The namespace starts as a copy of the host's table, copies of other processes' passing mounts
included (a container's rootfs, another session's overlay). When their owner unmounts one on the host
and removes its directory, the kernel detaches the copy here too, in the middle of some test's
before and after. Those copies, under the temp dir and the container engines' directories, are
detached as the session starts.
"""

from __future__ import annotations

import os
import tempfile

from cdictk.startpath.helpers import mountinfo, syscalls

MS_SHARED = 1 << 20
# Where other processes' mounts come and go: theirs, not the session's.
PASSING = (
    "/run/containerd",
    "/run/docker",
    "/run/netns",
    "/run/containers",
    "/run/libpod",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/lib/kubelet",
)


def root_is_shared() -> bool:
    """Whether ``/`` is a shared mount in this process's namespace (mountinfo's ``shared:N`` tag)."""
    shared = False  # the last line for / wins: it is the mount on top
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split(" - ", 1)[0].split()
            if fields[4] == "/":
                shared = any(tag.startswith("shared:") for tag in fields[6:])
    return shared


def enter_own_mount_namespace() -> str:
    """Moves this process, and whatever it starts from now on, into a mount namespace of its own.

    Returns one line for the report header: what was done, or why not (not root; no CAP_SYS_ADMIN).
    Call it before any thread starts: unshare(2) moves only the calling thread.
    """
    if os.geteuid() != 0:
        return "mount namespace: the host's (not root; the tests that mount are skipped)"
    shared = root_is_shared()
    try:
        syscalls.unshare(syscalls.CLONE_NEWNS)
    except OSError as exc:
        return f"mount namespace: the host's (unshare: {exc.strerror})"
    # Private first: that takes every mount out of the host's peer groups.
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    detach_passing_mounts((tempfile.gettempdir(), *PASSING))
    if shared:
        syscalls.mount(None, "/", None, syscalls.MS_REC | MS_SHARED)
    propagation = "shared in peer groups of its own" if shared else "private, as the host's /"
    namespace = os.readlink("/proc/self/ns/mnt")
    return f"mount namespace: the session's own, {namespace}, {propagation}"


def detach_passing_mounts(directories: tuple[str, ...]) -> None:
    """Detaches, in this (private) namespace only, every mount strictly below ``directories``."""
    with open("/proc/self/mountinfo", "rb") as file:
        points = {mount.mountpoint for mount in mountinfo.parse(file.read())}
    prefixes = tuple(os.path.realpath(directory).rstrip("/") + "/" for directory in directories)
    # Deepest first; a mount may be gone already with its parent, or stacked twice on one point.
    for point in sorted((p for p in points if p.startswith(prefixes)), key=len, reverse=True):
        try:
            syscalls.umount2(point, syscalls.MNT_DETACH)
        except OSError:
            continue
