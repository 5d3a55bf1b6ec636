"""Device nodes made inside a running container's rootfs, as runc would have made them.

Each node is created from the directory descriptor of its parent, resolved inside the rootfs (under
``/dev`` from the runtime's ``/dev`` mount), with mknodat: an image symlink at ``/dev`` or at the
node's path can neither move it out of the rootfs nor be followed. What is already there is kept when
it is the same node, replaced when it is a file, link or other node, and refused when a directory.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from cdictk.startpath.helpers.rootfs import Rootfs

_KINDS = {"c": stat.S_IFCHR, "u": stat.S_IFCHR, "b": stat.S_IFBLK, "p": stat.S_IFIFO}


def make_nodes(rootfs: Rootfs, nodes: list[dict[str, Any]]) -> list[str]:
    """Create ``nodes`` (``linux.devices`` entries) in ``rootfs``; the paths created or replaced."""
    made = []
    for node in nodes:
        if _make_node(rootfs, node):
            made.append(node["path"])
    return made


def _make_node(rootfs: Rootfs, node: dict[str, Any]) -> bool:
    path = node.get("path")
    kind = _KINDS.get(node.get("type", ""))
    major, minor = node.get("major", 0), node.get("minor", 0)
    if not isinstance(path, str) or not path.startswith("/") or kind is None:
        raise HookError(f"device node {node!r}: needs an absolute path and a type of c, b or p")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (major, minor)):
        raise HookError(f"device node {path}: bad major or minor number")
    mode = node.get("fileMode")
    mode = 0o666 if mode is None else mode
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise HookError(f"device node {path}: bad fileMode {mode!r}")
    rdev = os.makedev(major, minor) if kind != stat.S_IFIFO else 0
    parent, _, name = path.rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise HookError(f"device node {path}: not a file name")
    try:
        dir_fd = rootfs.mkdirs(parent or "/")
    except OSError as exc:
        raise HookError(
            f"device node {path}: cannot make its directory in the container: {exc.strerror}"
        ) from None
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_IFMT(st.st_mode) == kind and st.st_rdev == rdev:
                return False
            if stat.S_ISDIR(st.st_mode):
                raise HookError(f"device node {path}: a directory is in the way in the container")
            os.unlink(name, dir_fd=dir_fd)  # the image's file or link, or another node: never followed
        old = os.umask(0)  # the node's mode is the spec's, not what the umask leaves of it
        try:
            os.mknod(name, mode | kind, rdev, dir_fd=dir_fd)
        finally:
            os.umask(old)
        uid, gid = node.get("uid"), node.get("gid")
        if uid is not None or gid is not None:
            os.chown(
                name,
                -1 if uid is None else uid,
                -1 if gid is None else gid,
                dir_fd=dir_fd,
                follow_symlinks=False,
            )
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_IFMT(st.st_mode) != kind or st.st_rdev != rdev:
            raise HookError(f"device node {path}: changed while it was made")
        return True
    except OSError as exc:
        raise HookError(f"device node {path}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
