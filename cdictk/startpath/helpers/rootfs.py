"""File operations confined to a container's rootfs, which the image controls.

Every path is resolved inside the rootfs as if it were ``/``: absolute symlinks, ``..`` and links to
``/`` all stay inside (openat2 with RESOLVE_IN_ROOT, or a descriptor-by-descriptor walk where openat2
is missing or filtered). The path string of something inside the rootfs is never handed to a system
call. Files are created with O_EXCL|O_NOFOLLOW under a temporary name and renamed into place, so a
symlink planted at the destination is replaced, never followed; nothing is opened for reading until it
is known to be a regular file, so a FIFO or device node in the image cannot block or be poked.
"""

from __future__ import annotations

import errno
import os
import stat

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.fsutil import read_fd

MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup
_CROSSES = "crosses a mount point (an image link into a volume or host directory?)"
MAX_COMPONENTS = 128  # deeper than any real library or config path; bounds mkdirs' recursion
_PATH_FLAGS = os.O_PATH | os.O_CLOEXEC


class Rootfs:
    """A container's root filesystem, opened once; use as a context manager.

    Whatever the hooks *create or change* is resolved without crossing a mount point: the runtime
    mounts volumes and host directories into the rootfs (a spec's IPC directories, user volumes), and
    an image link such as ``/etc/ld.so.conf.d -> /tmp/nvidia-mps`` must not make root write there.
    The one exception is ``/dev``, the runtime's own tmpfs, where device links belong: paths under it
    are resolved from the ``/dev`` mount, again without crossing any further mount.
    """

    def __init__(self, path: str, *, use_openat2: bool = True, _dev_fd: int | None = None) -> None:
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if _dev_fd is None else _dev_fd
        self._openat2 = use_openat2
        self._is_dev = _dev_fd is not None
        self._dev = os.fstat(self.fd).st_dev
        self._dev_root: Rootfs | None = None

    def __enter__(self) -> Rootfs:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dev_root is not None:
            self._dev_root.__exit__()
        os.close(self.fd)

    # Resolution

    def open(
        self,
        path: str,
        flags: int = _PATH_FLAGS,
        mode: int = 0,
        *,
        follow: bool = True,
        same_mount: bool = False,
    ) -> int:
        """A descriptor for ``path`` resolved inside the rootfs; ``follow=False`` keeps a final symlink.

        ``same_mount``: fail with EXDEV rather than cross a mount point (``/dev`` paths start from the
        ``/dev`` mount), for anything that is about to be created or changed.
        """
        if same_mount:
            scope, path = self._scope(path)
            if scope is not self:
                return scope.open(path, flags, mode, follow=follow, same_mount=True)
        flags |= os.O_CLOEXEC
        if not follow:
            flags |= os.O_NOFOLLOW
        if self._openat2:
            try:
                return self._open_with_openat2(path, flags, mode, same_mount)
            except OSError as exc:
                # ENOSYS: kernel before 5.6; EPERM: a seccomp filter. Everything else is a real answer.
                if exc.errno not in (errno.ENOSYS, errno.EPERM):
                    raise
                self._openat2 = False
        return self._open_by_walking(path, flags, mode, same_mount)

    def _scope(self, path: str) -> tuple[Rootfs, str]:
        """The root a container path is created from: the ``/dev`` mount for paths under it."""
        parts = _components(path)
        if not parts or parts[0] != "dev" or self._is_dev:
            return self, path
        if self._dev_root is None:
            try:
                fd = self.open("/dev", _PATH_FLAGS | os.O_DIRECTORY)
            except FileNotFoundError:
                if len(parts) == 1:  # "/dev" itself, missing: made in the rootfs like any directory
                    return self, path
                raise
            self._dev_root = Rootfs(f"{self.path}/dev", use_openat2=self._openat2, _dev_fd=fd)
        return self._dev_root, "/" + "/".join(parts[1:])

    def _open_with_openat2(self, path: str, flags: int, mode: int, same_mount: bool) -> int:
        from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

        resolve = syscalls.RESOLVE_IN_ROOT | syscalls.RESOLVE_NO_MAGICLINKS
        if same_mount:
            resolve |= syscalls.RESOLVE_NO_XDEV
        try:
            return syscalls.openat2(self.fd, path, flags, mode if flags & os.O_CREAT else 0, resolve)
        except OSError as exc:
            if exc.errno == errno.EXDEV:  # the same words as the walk's, whichever resolved it
                raise OSError(errno.EXDEV, _CROSSES, path) from None
            raise

    def _open_by_walking(self, path: str, flags: int, mode: int, same_mount: bool) -> int:
        """Resolve one component at a time on descriptors we hold; ``..`` never climbs above the root.

        ``same_mount`` compares mount ids (from /proc/self/fdinfo) of every descriptor the walk opens
        with the root's: device numbers alone cannot tell a bind mount of the rootfs's own filesystem.
        """
        root_mount = mount_id(self.fd) if same_mount else None
        stack = [os.dup(self.fd)]
        try:
            parts = _components(path)
            links = 0
            while parts:
                name = parts.pop(0)
                if name == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                    continue
                last = not parts
                try:
                    st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if last and flags & os.O_CREAT:
                        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=stack[-1])
                    raise
                if same_mount and st.st_dev != self._dev:
                    raise OSError(errno.EXDEV, _CROSSES, path)
                if stat.S_ISLNK(st.st_mode) and not (last and flags & os.O_NOFOLLOW):
                    links += 1
                    if links > MAX_LINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                    target = os.readlink(name, dir_fd=stack[-1])
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                    parts[:0] = _components(target)
                    continue
                if last:
                    # O_NOFOLLOW: if the entry became a symlink since the stat, fail rather than follow it.
                    fd = os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=stack[-1])
                    if root_mount is not None and mount_id(fd) != root_mount:
                        os.close(fd)
                        raise OSError(errno.EXDEV, _CROSSES, path)
                    return fd
                stack.append(os.open(name, _PATH_FLAGS | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=stack[-1]))
                if root_mount is not None and mount_id(stack[-1]) != root_mount:
                    raise OSError(errno.EXDEV, _CROSSES, path)
            # The path named the root itself ("/", "", "a/..").
            if flags & os.O_CREAT and flags & os.O_EXCL:
                raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), path)
            return os.open(".", flags & ~(os.O_CREAT | os.O_EXCL), dir_fd=stack[-1])
        finally:
            for fd in stack:
                os.close(fd)

    # Directories

    def mkdirs(self, path: str, mode: int = 0o755) -> int:
        """An O_PATH descriptor for directory ``path``, creating missing components (like ``mkdir -p``).

        A symlink on the way is followed inside the rootfs; when its target is missing, the target is
        created (inside the rootfs, like everything else), so an image whose ``/etc/ld.so.conf.d`` is a
        dangling link still gets its drop-in, in the rootfs. No mount point is crossed.
        """
        try:
            scope, path = self._scope(path)
        except FileNotFoundError:  # a path under a /dev the image lacks (and no runtime mounted)
            os.close(self.mkdirs("/dev", mode))
            scope, path = self._scope(path)
        if scope is not self:
            return scope.mkdirs(path, mode)
        for _ in range(MAX_LINKS + 1):
            made = self._mkdirs_once(path, mode)
            if isinstance(made, int):
                return made
            path = made  # a dangling link: make its target instead
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)

    def _mkdirs_once(self, path: str, mode: int) -> int | str:
        """The directory's descriptor, or the path a dangling symlink in the way points to."""
        parts = _components(path)
        if len(parts) > MAX_COMPONENTS:
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path[:200])
        try:
            return self.open(path, _PATH_FLAGS | os.O_DIRECTORY, same_mount=True)
        except FileNotFoundError:
            pass
        if parts and parts[-1] == "..":  # "a/missing/..": make what ".." climbs out of, as mkdir -p does
            os.close(self.mkdirs("/".join(parts[:-1]) or "/", mode))
            return self.open(path, _PATH_FLAGS | os.O_DIRECTORY, same_mount=True)
        parent, name = _split(path)
        if not name:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        parent_fd = self.mkdirs(parent, mode)
        try:
            try:  # noqa: SIM105 - contextlib costs imports on every container start
                os.mkdir(name, mode, dir_fd=parent_fd)
            except FileExistsError:
                pass  # made by someone else meanwhile, or a symlink: the open below decides
            try:
                fd = os.open(name, _PATH_FLAGS | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
            except OSError:
                fd = -1
            if fd >= 0:
                if os.fstat(fd).st_dev != self._dev:
                    os.close(fd)
                    raise OSError(errno.EXDEV, _CROSSES, path)
                return fd
            try:
                target = os.readlink(name, dir_fd=parent_fd)
            except OSError:
                # Not a link: a file is in the way (ENOTDIR), or it changed under us.
                return self.open(path, _PATH_FLAGS | os.O_DIRECTORY, same_mount=True)
        finally:
            os.close(parent_fd)
        # Relative targets are taken from the link's directory; ".." in them is resolved by the kernel.
        return target if target.startswith("/") else f"{parent}/{target}"

    def _check_creatable(self, path: str) -> None:
        """Fail now, before anything is made, where making ``path`` would cross a mount point.

        The nearest existing ancestor is what counts; a dangling link on the way is only met (and
        refused just the same) when the directories are made.
        """
        while True:
            try:
                os.close(self.open(path, _PATH_FLAGS, same_mount=True))
                return
            except FileNotFoundError:
                parent, name = _split(path)
                if not name:
                    return
                path = parent

    # Files

    def read_regular(self, path: str, limit: int, *, follow: bool = True, same_mount: bool = False) -> bytes:
        """The content of regular file ``path``; anything else, or more than ``limit`` bytes, is an error."""
        fd = self.open(path, _PATH_FLAGS, follow=follow, same_mount=same_mount)
        try:
            return read_regular_fd(fd, limit, path)
        finally:
            os.close(fd)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> bool:
        """Put ``data`` at ``path`` atomically, replacing (never following) what is there.

        Returns False when the file already holds exactly ``data`` with ``mode``: nothing is written.
        """
        parent, name = _split(path)
        dir_fd = self.mkdirs(parent)
        try:
            if _same_file_content(dir_fd, name, data, mode):
                return False
            temp = f".{name}.cdictk-{os.urandom(6).hex()}"
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd
            )
            try:
                os.fchmod(fd, mode)  # the umask must not decide
                _write_all(fd, data)
                os.close(fd)
                fd = -1
                os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                if fd >= 0:
                    os.close(fd)
                _unlink_quietly(temp, dir_fd)
                raise
            return True
        finally:
            os.close(dir_fd)

    def create_exclusive(self, path: str, data: bytes, mode: int = 0o644) -> bool:
        """Create ``path`` with ``data`` only if nothing (not even a dangling symlink) is there."""
        parent, name = _split(path)
        dir_fd = self.mkdirs(parent)
        try:
            try:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    mode,
                    dir_fd=dir_fd,
                )
            except FileExistsError:
                return False
            try:
                os.fchmod(fd, mode)
                _write_all(fd, data)
            finally:
                os.close(fd)
            return True
        finally:
            os.close(dir_fd)

    def symlink(self, target: str, path: str) -> bool:
        """Make ``path`` a symlink to ``target`` (stored verbatim), like ``ln -sfn``, atomically.

        Returns False when ``path`` already is that symlink. A directory at ``path`` is an error.
        """
        return bool(self.symlinks([(target, path)]))

    def symlinks(self, links: list[tuple[str, str]]) -> list[str]:
        """Make each (target, path) as :meth:`symlink` does; the paths that were created or changed.

        Links sharing a directory share one lookup of it: a driver's links mostly live in one place.
        An OSError names the link that failed.
        """
        by_parent: dict[str, list[tuple[str, str, str]]] = {}
        for target, path in links:
            parent, name = _split(path)
            if not name:
                raise OSError(errno.EINVAL, "a link cannot be the root directory", path)
            by_parent.setdefault(parent, []).append((target, name, path))
        for parent, entries in by_parent.items():
            try:
                self._check_creatable(parent)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, entries[0][2]) from None
        changed = []
        for parent, entries in by_parent.items():
            try:
                dir_fd = self.mkdirs(parent)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, entries[0][2]) from None
            try:
                for target, name, path in entries:
                    try:
                        if _replace_link(dir_fd, target, name):
                            changed.append(path)
                    except OSError as exc:
                        raise OSError(exc.errno, exc.strerror, path) from None
            finally:
                os.close(dir_fd)
        return changed

    def remove_symlink(self, path: str) -> bool:
        """Remove ``path`` when it is a symlink, never a file or a directory, found without crossing a
        mount point; False when it is something else. A missing path is FileNotFoundError."""
        parent, name = _split(path)
        if not name:
            return False
        dir_fd = self.open(parent, _PATH_FLAGS | os.O_DIRECTORY, same_mount=True)
        try:
            if not stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return False
            os.unlink(name, dir_fd=dir_fd)
            return True
        finally:
            os.close(dir_fd)


def reopen_regular(fd: int, what: str) -> int:
    """A readable descriptor for the regular file behind O_PATH descriptor ``fd``; anything else is refused.

    Re-opening through /proc/self/fd reaches the very inode that was checked, whatever happens to the
    path meanwhile, and a FIFO or device node is never opened (which could block or poke a driver).
    """
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", what)
    return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)


def read_regular_fd(fd: int, limit: int, what: str) -> bytes:
    """Read at most ``limit`` bytes of the regular file behind O_PATH descriptor ``fd``."""
    if os.fstat(fd).st_size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", what)
    readable = reopen_regular(fd, what)
    try:
        data = read_fd(readable, limit)
    finally:
        os.close(readable)
    if data is None:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", what)
    return data


def _replace_link(dir_fd: int, target: str, name: str) -> bool:
    try:
        if os.readlink(name, dir_fd=dir_fd) == target:
            return False
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EINVAL):
            raise
    temp = f".{name}.cdictk-{os.urandom(6).hex()}"
    os.symlink(target, temp, dir_fd=dir_fd)
    try:
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _unlink_quietly(temp, dir_fd)
        raise
    return True


def mount_id(fd: int) -> int | None:
    """The id of the mount ``fd`` is on (``mnt_id`` in /proc/self/fdinfo, Linux 3.15); None if unknown."""
    try:
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(info, 4096)
    finally:
        os.close(info)
    for line in text.splitlines():
        if line.startswith(b"mnt_id:"):
            value = line[7:].strip()
            return int(value) if value.isdigit() else None
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _same_file_content(dir_fd: int, name: str, data: bytes, mode: int) -> bool:
    try:
        fd = os.open(name, _PATH_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data) or stat.S_IMODE(st.st_mode) != mode:
            return False
        return read_regular_fd(fd, len(data), name) == data
    finally:
        os.close(fd)


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:  # noqa: SIM105 - contextlib costs imports on every container start
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part and part != "."]


def _split(path: str) -> tuple[str, str]:
    """("/a/b", "c") for "/a/b/c"; the name is "" for the root. A path ending in ``..`` is EINVAL."""
    parts = _components(path)
    if parts and parts[-1] == "..":
        raise OSError(errno.EINVAL, "path ends in '..'", path)
    if not parts:
        return "/", ""
    return "/" + "/".join(parts[:-1]), parts[-1]


def open_rootfs(path: str) -> Rootfs:
    """The container's rootfs, opened; never the host's own root."""
    try:
        rootfs = Rootfs(path)
    except OSError as exc:
        raise HookError(f"container rootfs {path}: {exc.strerror}") from None
    # The path was checked as a string; a link to "/" on the way is caught here, on the inode.
    here, host = os.fstat(rootfs.fd), os.stat("/")
    if (here.st_dev, here.st_ino) == (host.st_dev, host.st_ino):
        rootfs.__exit__()
        raise HookError(f"container rootfs {path} is the host's root: refused")
    return rootfs
