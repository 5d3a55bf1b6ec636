"""Driver files bind-mounted read-only into a running container, from descriptors.

This is where NVIDIA's legacy hook had its worst escapes (CVE-2024-0132, CVE-2025-23359): it built
mount sources and targets as path strings after joining the container's namespace, so image
symlinks chose what got mounted where. Here:

- every source is a host path from the spec, cloned with ``open_tree(OPEN_TREE_CLONE)`` in the
  host's mount namespace *before* the hook joins the container's, and made read-only, nosuid and
  private with ``mount_setattr`` while still detached: nothing in the image is ever a source, and
  the mount is never writable or shared, not even for an instant;
- every target is resolved inside the rootfs (openat2 ``RESOLVE_IN_ROOT``, never crossing a mount
  point), created with ``O_EXCL|O_NOFOLLOW`` when missing, and a symlink at the target is refused
  rather than followed;
- the clone is attached with ``move_mount`` onto the target's descriptor, and the target is then
  resolved again and must be the source's inode on a read-only mount.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import mount_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from cdictk.startpath.helpers.rootfs import Rootfs

_AT_FDCWD = -100


class Clone:
    """A detached, read-only copy of one host mount point, waiting for its target."""

    __slots__ = ("destination", "directory", "fd", "identity", "source")

    def __init__(self, destination: str, source: str, fd: int) -> None:
        self.destination = destination
        self.source = source
        self.fd = fd
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self.directory = stat.S_ISDIR(st.st_mode)


def clone_sources(mounts: list[dict[str, Any]]) -> list[Clone]:
    """Detached read-only clones of every mount's host source. Call in the host's mount namespace."""
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    clones: list[Clone] = []
    try:
        for mount in mounts:
            destination, source = mount.get("destination"), mount.get("source")
            options = mount.get("options") or []
            if mount.get("type", "bind") != "bind" and "bind" not in options and "rbind" not in options:
                raise HookError(f"mount {destination}: only bind mounts can be added to a running container")
            if not isinstance(source, str) or not source.startswith("/"):
                raise HookError(f"mount {destination}: the source must be an absolute host path")
            if not isinstance(destination, str) or not destination.startswith("/"):
                raise HookError(f"mount {source}: the destination must be an absolute path")
            recursive = "rbind" in options
            flags = syscalls.OPEN_TREE_CLONE | (syscalls.AT_RECURSIVE if recursive else 0)
            attrs = syscalls.MOUNT_ATTR_RDONLY | syscalls.MOUNT_ATTR_NOSUID
            if "nodev" in options:
                attrs |= syscalls.MOUNT_ATTR_NODEV
            if "noexec" in options:
                attrs |= syscalls.MOUNT_ATTR_NOEXEC
            try:
                fd = syscalls.open_tree(_AT_FDCWD, source, flags)
            except OSError as exc:
                raise HookError(f"mount {destination}: host source {source}: {exc.strerror}") from None
            try:
                syscalls.mount_setattr(fd, attrs, syscalls.MS_PRIVATE, recursive=recursive)
                clones.append(Clone(destination, source, fd))
            except OSError as exc:
                os.close(fd)
                raise HookError(
                    f"mount {destination}: cannot make {source} read-only: {exc.strerror}"
                ) from None
            except BaseException:
                os.close(fd)
                raise
    except BaseException:
        close_all(clones)
        raise
    return clones


def close_all(clones: list[Clone]) -> None:
    for clone in clones:
        os.close(clone.fd)


def attach_all(rootfs: Rootfs, clones: list[Clone]) -> None:
    """Attach every clone at its destination in ``rootfs``. Call in the container's mount namespace."""
    for clone in clones:
        _attach(rootfs, clone)


def _attach(rootfs: Rootfs, clone: Clone) -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    where = f"mount {clone.destination}"
    parent, _, name = clone.destination.rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise HookError(f"{where}: not a file name")
    try:
        dir_fd = rootfs.mkdirs(parent or "/")
    except OSError as exc:
        raise HookError(f"{where}: cannot make its directory in the container: {exc.strerror}") from None
    try:
        target = _target(dir_fd, name, clone, where)
        try:
            syscalls.move_mount(clone.fd, target)
        except OSError as exc:
            raise HookError(f"{where}: cannot mount {clone.source}: {exc.strerror}") from None
        finally:
            os.close(target)
        _verify(dir_fd, name, clone, where)
    finally:
        os.close(dir_fd)


def _target(dir_fd: int, name: str, clone: Clone, where: str) -> int:
    """An O_PATH descriptor for the mount point, made when missing; never a symlink."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        try:
            if clone.directory:
                os.mkdir(name, 0o755, dir_fd=dir_fd)
            else:
                os.close(
                    os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o644,
                        dir_fd=dir_fd,
                    )
                )
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:
            raise HookError(
                f"{where}: cannot make the mount point in the container: {exc.strerror}"
            ) from None
    except OSError as exc:
        raise HookError(f"{where}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    problem = ""
    if stat.S_ISLNK(mode):
        problem = "the image has a symlink there; it is not followed"
    elif stat.S_ISDIR(mode) != clone.directory:
        problem = f"the image has a {'directory' if stat.S_ISDIR(mode) else 'file'} there"
    elif mount_id(fd) != mount_id(dir_fd):
        # A volume mounted exactly there: stacking on it could propagate to wherever it is shared.
        problem = "something is mounted there already (a volume?)"
    if problem:
        os.close(fd)
        raise HookError(f"{where}: {problem}")
    return fd


def _verify(dir_fd: int, name: str, clone: Clone, where: str) -> None:
    """Resolved again, the mount point must be the source's inode, on a read-only mount."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise HookError(f"{where}: cannot check the mount: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != clone.identity:
            raise HookError(f"{where}: the mount point does not show {clone.source} after mounting")
        if not os.fstatvfs(fd).f_flag & os.ST_RDONLY:
            raise HookError(f"{where}: the mount of {clone.source} is not read-only")
    finally:
        os.close(fd)
