"""The running container a prestart hook works on, found through its process and never by a path in it.

runc runs prestart hooks in the host's namespaces once the container's process exists (paused
before it execs the container's program), its mount namespace holds the rootfs mounted at
``root.path`` (not yet pivoted to), and its cgroup has runc's device rules. The OCI state gives the
process id; the process is pinned with a pidfd, its mount namespace opened through ``/proc/<pid>``,
and the pin checked again afterwards, so a pid reused meanwhile is caught rather than joined.
"""

from __future__ import annotations

import os
import select

from cdictk.hooks.hookerror import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Container:
    """The pinned container process and its mount namespace; use as a context manager."""

    __slots__ = ("id", "mnt_ns", "pid", "pidfd", "rootfs")

    def __init__(self, *, id: str, pid: int, rootfs: str, proc_root: str = "/proc") -> None:
        self.id = id
        self.pid = pid
        self.rootfs = rootfs  # a path in the container's mount namespace, from the bundle (trusted)
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError as exc:
            raise HookError(f"container process {pid}: {exc.strerror}") from None
        try:
            self.mnt_ns = _open_namespace(proc_root, pid, "mnt")
            try:
                _refuse_shared_namespaces(proc_root, pid)
                if not alive(self.pidfd):
                    raise HookError(f"container process {pid} exited while the hook ran")
            except BaseException:
                os.close(self.mnt_ns)
                raise
        except BaseException:
            os.close(self.pidfd)
            raise

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.mnt_ns)
        os.close(self.pidfd)


def container_of(state: dict[str, Any], config: dict[str, Any], proc_root: str = "/proc") -> Container:
    """The container the OCI ``state`` names; its rootfs from crun's ``root`` or ``config.json``."""
    from cdictk.hooks.ocistate import checked_rootfs, id_and_bundle  # noqa: PLC0415

    pid = state.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise HookError(f"OCI state: pid must be the container's process id, not {pid!r}")
    ident, bundle = id_and_bundle(state)
    root = state.get("root")
    if root is None:
        root = (config.get("root") or {}).get("path") if isinstance(config.get("root"), dict) else None
    if not isinstance(root, str):
        raise HookError("config.json: root.path: missing or not a string")
    return Container(id=ident, pid=pid, rootfs=checked_rootfs(root, bundle), proc_root=proc_root)


def alive(pidfd: int) -> bool:
    """A pidfd polls readable once its process has exited."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return not poller.poll(0)


def _open_namespace(proc_root: str, pid: int, name: str) -> int:
    path = f"{proc_root}/{pid}/ns/{name}"
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"{path}: {exc.strerror}") from None


def _refuse_shared_namespaces(proc_root: str, pid: int) -> None:
    """The hook mounts and makes nodes in the container's mount namespace: never in ours (the host's).

    A container in its own user namespace is refused: its root cannot make device nodes, and the
    driver files would need an idmapped mount.
    """
    for name in ("mnt", "user"):
        try:
            theirs = os.stat(f"{proc_root}/{pid}/ns/{name}")
            ours = os.stat(f"{proc_root}/self/ns/{name}")
        except OSError as exc:
            raise HookError(f"{proc_root}/{pid}/ns/{name}: {exc.strerror}") from None
        same = (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)
        if name == "mnt" and same:
            raise HookError("the container shares the host's mount namespace: refused")
        if name == "user" and not same:
            raise HookError("containers in a user namespace are not supported by the prestart hook; use CDI")
