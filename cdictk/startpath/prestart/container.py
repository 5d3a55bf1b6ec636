"""The running container a prestart hook works on, found through its process and never by a path in it.

runc runs prestart hooks in the host's namespaces once the container's process exists (paused
before it execs the container's program), its mount namespace holds the rootfs mounted at
``root.path`` (not yet pivoted to), and its cgroup has runc's device rules. The OCI state gives the
process id; the process is pinned with a pidfd, its mount namespace opened through ``/proc/<pid>``,
and the pin checked again afterwards.

Joining a mount namespace whose root is the image's would hand the image everything the hook then
resolves by path (the rootfs, a spec hook's program): so the state must say the container is being
created, and the process's root must still be the host's, as it is for a container runc or crun is
creating and for no started container. (A pid reused meanwhile cannot be pinned: runc and crun do
not reap their container's process while a hook runs, so a killed one stays a zombie, whose
namespaces are gone.)
"""

from __future__ import annotations

import os
import select

from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


# "creating" is what runc and crun pass to prestart hooks; "created" what some runtimes passed before
# runtime-spec 1.0.2 named the stage.
_CREATING = ("creating", "created")


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
                _require_host_root(proc_root, pid)
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
    from cdictk.startpath.helpers.ocistate import checked_rootfs, id_and_bundle  # noqa: PLC0415

    pid = state.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise HookError(f"OCI state: pid must be the container's process id, not {pid!r}")
    ident, bundle = id_and_bundle(state)
    status = state.get("status")
    if status not in _CREATING:
        raise HookError(f"OCI state: status {status!r}: the prestart hook runs while a container is created")
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


def _require_host_root(proc_root: str, pid: int) -> None:
    """The process has not pivoted into its rootfs yet: its root is ours."""
    try:
        theirs = os.stat(f"{proc_root}/{pid}/root")
        ours = os.stat("/")
    except OSError as exc:
        raise HookError(f"{proc_root}/{pid}/root: {exc.strerror}") from None
    if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
        raise HookError(
            f"container process {pid} has left the host's root already: not a container being created"
        )


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
    try:
        with open(f"{proc_root}/self/uid_map", "rb") as file:
            uid_map = file.read(4096).split()
    except OSError as exc:
        raise HookError(f"{proc_root}/self/uid_map: {exc.strerror}") from None
    if uid_map != [b"0", b"0", b"4294967295"]:  # not the host's user namespace: a rootless engine
        raise HookError("a rootless engine cannot give GPUs through this hook (no mknod, no cgroup); use CDI")
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
