"""The ``chmod`` hook step: set the mode of paths inside the container, never following the image's links.

NVIDIA's hook joins the rootfs and the path as strings and calls chmod, which follows symlinks: an image
with ``/dev/dri -> /etc`` (or any link to a host path reachable through ``..``) gets a host file's mode
changed by root. Here every path is resolved inside the rootfs (``..`` and absolute links stay inside),
a final symlink is refused rather than followed, and the mode is set through the O_PATH descriptor of
what was resolved: nothing is opened for reading, so a FIFO or device node in the image cannot block
the hook or be poked. As NVIDIA's: a path the container lacks is skipped, a path already in the mode is
left alone (its ctime too), and a permission error is a warning (NVIDIA #143: a ``/dev`` bind-mounted
from the host or read-only; here EPERM, EACCES and EROFS).
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.steps import Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.startpath.helpers.rootfs import Rootfs

MAX_MODE = 0o7777
_IGNORED = (errno.EPERM, errno.EACCES, errno.EROFS)
_MISSING = (errno.ENOENT, errno.ENOTDIR)


def parse_mode(text: str) -> int:
    """An octal mode such as ``755`` or ``0755`` (0 to 7777); anything else is a HookError."""
    if not 1 <= len(text) <= 8 or any(char not in "01234567" for char in text):
        raise HookError(f"chmod: mode {text!r} is not an octal number such as 755")
    mode = int(text, 8)
    if mode > MAX_MODE:
        raise HookError(f"chmod: mode {text!r} is above 7777")
    return mode


def chmod_paths(rootfs: Rootfs, mode: int, paths: list[str]) -> None:
    """Set ``mode`` on each container path in ``paths``, resolved inside ``rootfs``.

    Every path must be absolute, without NUL or newline. A path the container lacks is skipped; a
    path whose last component is a symlink is refused (HookError) before anything is changed.
    """
    if not 0 <= mode <= MAX_MODE:
        raise HookError(f"chmod: mode {mode:o} is outside 0..7777")
    for path in paths:
        _check_path(path)
    resolved: list[tuple[str, int]] = []
    try:
        for path in paths:
            fd = _open_in_root(rootfs, path)
            if fd is not None:
                resolved.append((path, fd))
        chmod = _Chmod()
        for path, fd in resolved:
            if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                chmod.apply(fd, mode, path)
    finally:
        for _, fd in resolved:
            os.close(fd)


def _check_path(path: str) -> None:
    if not path.startswith("/") or "\0" in path or "\n" in path or ".." in path.split("/"):
        raise HookError(f"chmod: path {path!r} must be absolute, without NUL, newline or '..'")


def _open_in_root(rootfs: Rootfs, path: str) -> int | None:
    """An O_PATH descriptor for ``path`` itself (a final symlink is refused); None if it is missing."""
    try:
        fd = rootfs.open(path, os.O_PATH, follow=False, same_mount=True)
    except OSError as exc:
        if exc.errno in _MISSING:
            return None
        if exc.errno == errno.EXDEV:
            # A node the runtime bind-mounted (rootless podman's /dev), or an image link into a volume:
            # not ours to change, and not worth failing the container over.
            print(f"cdictk hook: chmod {path}: on another mount; left alone", file=sys.stderr)
            return None
        raise HookError(f"chmod: cannot resolve {path} in the container: {exc.strerror}") from exc
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise HookError(f"chmod: {path} is a symbolic link in the container; refusing to follow it")
    return fd


class _Chmod:
    """fchmodat2 on the O_PATH descriptor; before Linux 6.6, chmod through a verified /proc/self/fd."""

    def __init__(self) -> None:
        self._through_proc = False

    def apply(self, fd: int, mode: int, path: str) -> None:
        try:
            self._chmod(fd, mode)
        except OSError as exc:
            if exc.errno in _IGNORED:
                print(f"cdictk hook: chmod {mode:o} {path}: {exc.strerror}; ignored", file=sys.stderr)
                return
            raise HookError(f"chmod: cannot change the mode of {path}: {exc.strerror}") from exc

    def _chmod(self, fd: int, mode: int) -> None:
        from cdictk.startpath.helpers import syscalls  # noqa: PLC0415 - ctypes only when a mode must change

        if not self._through_proc:
            try:
                syscalls.fchmodat2(fd, "", mode, syscalls.AT_EMPTY_PATH)
                return
            except OSError as exc:
                if exc.errno != errno.ENOSYS:
                    raise
            _require_procfs()
            self._through_proc = True
        # The magic link reaches the very inode resolved in the rootfs; chmod(2) opens nothing.
        os.chmod(f"/proc/self/fd/{fd}", mode)


def _require_procfs() -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    try:
        proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(
            f"chmod: fchmodat2 is missing (Linux < 6.6) and /proc cannot be opened: {exc.strerror}"
        ) from exc
    try:
        if syscalls.fstatfs_type(proc) != syscalls.PROC_SUPER_MAGIC:
            raise HookError("chmod: fchmodat2 is missing (Linux < 6.6) and /proc is not a procfs")
    finally:
        os.close(proc)


def prepare(options: Options) -> Prepared:
    """The chmod step: the mode and every path are checked before any mode changes."""
    text = options.get("mode")
    if text is None:
        raise HookError("--mode is required")
    mode, paths = parse_mode(text), options.all("path")
    for path in paths:
        _check_path(path)
    return Prepared(lambda rootfs: chmod_paths(rootfs, mode, paths))
