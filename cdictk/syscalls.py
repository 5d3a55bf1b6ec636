"""Start path: standard library only.

The Linux system calls Python 3.11's ``os`` lacks, through ctypes.

Imported only by the hook steps that need them (ctypes costs a few milliseconds per container start):
openat2 for confined path resolution, namespaces, mounts and pivot_root for the ldconfig sandbox, the new
mount API for read-only overlays of single files, fchmodat2 for chmod without following links;
renameat2 for a create that must not replace a file, and inotify for the library's spec cache.
Every wrapper raises OSError with the errno, as ``os`` does.
"""

from __future__ import annotations

import ctypes
import os
import sys

# Numbers from 424 on are the same on every architecture; older calls differ.
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
SYS_OPENAT2 = 437
SYS_MOUNT_SETATTR = 442
SYS_FCHMODAT2 = 452
_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "ppc64le": 357, "s390x": 347}
RENAME_NOREPLACE = 0x1
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2

AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
AT_SYMLINK_NOFOLLOW = 0x100
OPEN_TREE_CLONE = 0x1
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

PROC_SUPER_MAGIC = 0x9FA0
TMPFS_MAGIC = 0x01021994

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str | bytes = "") -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), what) if what else OSError(err, os.strerror(err))
    return result


def _path(path: str | bytes | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """openat2(2); EAGAIN (a rename or mount raced the lookup) is retried a bounded number of times."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    encoded = os.fsencode(path)
    for _ in range(16):
        fd = _libc.syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(encoded),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        if ctypes.get_errno() != 11:  # EAGAIN
            break
    return _check(-1, path)


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)))


def setns(fd: int, nstype: int) -> None:
    """setns(2) (``os.setns`` is Python 3.12+). Joining a mount namespace needs a single-threaded caller."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)))


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2). A bind source given as /proc/self/fd/N must have been opened in the caller's current
    mount namespace: one opened before unshare(CLONE_NEWNS) is refused with EINVAL."""
    _check(
        _libc.mount(_path(source), _path(target), _path(fstype), ctypes.c_ulong(flags), _path(data)), target
    )


def umount2(target: str, flags: int) -> None:
    _check(_libc.umount2(_path(target), ctypes.c_int(flags)), target)


def pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(38, f"pivot_root: unsupported architecture {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(number), _path(new_root), _path(put_old)), new_root)


def fchmodat2(dirfd: int, path: str, mode: int, flags: int) -> None:
    """fchmodat2(2), Linux 6.6: chmod an O_PATH descriptor (AT_EMPTY_PATH) without following links."""
    _check(
        _libc.syscall(
            ctypes.c_long(SYS_FCHMODAT2),
            ctypes.c_int(dirfd),
            _path(path),
            ctypes.c_uint(mode),
            ctypes.c_int(flags),
        ),
        path,
    )


def renameat2(old_dirfd: int, old: str, new_dirfd: int, new: str, flags: int) -> None:
    """renameat2(2): with RENAME_NOREPLACE, EEXIST instead of replacing ``new``, atomically."""
    number = _RENAMEAT2.get(os.uname().machine)
    if number is None:
        raise OSError(38, f"renameat2: unsupported architecture {os.uname().machine}")
    _check(
        _libc.syscall(
            ctypes.c_long(number),
            ctypes.c_int(old_dirfd),
            _path(old),
            ctypes.c_int(new_dirfd),
            _path(new),
            ctypes.c_uint(flags),
        ),
        new,
    )


def inotify_init1(flags: int) -> int:
    return _check(_libc.inotify_init1(ctypes.c_int(flags)))


def inotify_add_watch(fd: int, path: str, mask: int) -> int:
    """The watch descriptor; adding a path watched already returns its descriptor again."""
    return _check(_libc.inotify_add_watch(ctypes.c_int(fd), _path(path), ctypes.c_uint32(mask)), path)


def fstatfs_type(fd: int) -> int:
    """The filesystem magic (statfs f_type) of what ``fd`` refers to."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit; f_type comes first
    _check(_libc.fstatfs(ctypes.c_int(fd), buf))
    # f_type is a long everywhere but s390x, where it is a 4-byte unsigned int.
    size = 4 if os.uname().machine == "s390x" else ctypes.sizeof(ctypes.c_long)
    return int.from_bytes(buf.raw[:size], sys.byteorder)


def fsopen(fstype: str) -> int:
    # FSOPEN_CLOEXEC is 1, not O_CLOEXEC.
    return _check(_libc.syscall(ctypes.c_long(SYS_FSOPEN), _path(fstype), ctypes.c_uint(1)), fstype)


def fsconfig(fd: int, command: int, key: str | None = None, value: str | None = None) -> None:
    _check(
        _libc.syscall(
            ctypes.c_long(SYS_FSCONFIG), ctypes.c_int(fd), ctypes.c_uint(command), _path(key), _path(value), 0
        )
    )


def fsmount(fd: int, attrs: int) -> int:
    return _check(
        _libc.syscall(ctypes.c_long(SYS_FSMOUNT), ctypes.c_int(fd), ctypes.c_uint(1), ctypes.c_uint(attrs))
    )


def open_tree(dirfd: int, path: str, flags: int) -> int:
    return _check(
        _libc.syscall(
            ctypes.c_long(SYS_OPEN_TREE),
            ctypes.c_int(dirfd),
            _path(path),
            ctypes.c_uint(flags | os.O_CLOEXEC),
        ),
        path,
    )


def mount_setattr(
    fd: int, attr_set: int, propagation: int = 0, *, attr_clr: int = 0, recursive: bool = False
) -> None:
    """Set (and clear) attributes on the mount ``fd`` refers to, and every mount below when ``recursive``."""
    attr = _MountAttr(attr_set, attr_clr, propagation, 0)
    _check(
        _libc.syscall(
            ctypes.c_long(SYS_MOUNT_SETATTR),
            ctypes.c_int(fd),
            _path(""),
            ctypes.c_uint(AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
    )


def move_mount(from_fd: int, to_fd: int) -> None:
    """Attach the detached mount ``from_fd`` onto the file or directory ``to_fd`` refers to."""
    _check(
        _libc.syscall(
            ctypes.c_long(SYS_MOVE_MOUNT),
            ctypes.c_int(from_fd),
            _path(""),
            ctypes.c_int(to_fd),
            _path(""),
            ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
        )
    )


PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return _check(
        _libc.prctl(
            ctypes.c_int(option),
            ctypes.c_ulong(arg2),
            ctypes.c_ulong(arg3),
            ctypes.c_ulong(arg4),
            ctypes.c_ulong(arg5),
        )
    )


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """capset(2) for this thread: the three 64-bit capability sets."""
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    mask = 0xFFFFFFFF
    data = (ctypes.c_uint32 * 6)(
        effective & mask,
        permitted & mask,
        inheritable & mask,
        effective >> 32,
        permitted >> 32,
        inheritable >> 32,
    )
    _check(_libc.capset(header, data))
