"""The Linux system calls Python 3.11's ``os`` lacks, through ctypes.

Imported only by the hook steps that need them (ctypes costs milliseconds per container start):
openat2 for confined path resolution, namespaces, mounts and pivot_root for the ldconfig sandbox, the new
mount API for read-only overlays of single files, fchmodat2 for chmod without following links;
renameat2 for a create that must not replace a file, and bpf for the prestart hook's cgroup device
programs.

glibc's wrapper is called where every glibc we run on (2.31 to 2.39) has one; the new mount API's
wrappers came with glibc 2.36, so before it those calls, like openat2 and fchmodat2 (no wrapper in
any glibc), go through syscall(2). Their numbers, 424 and up, are the same on every architecture cdictk
runs on (:data:`SHARED_NUMBERS`); bpf's differ (:data:`SYS_BPF`). Elsewhere (alpha and MIPS number
them apart) such a call fails with ENOSYS naming the machine, which callers treat as a kernel that
lacks it. Each C function gets its argument and result types declared the first time it is called.

Every wrapper raises OSError with the errno, as ``os`` does; on ENOSYS and EPERM, a
:class:`SyscallError` whose ``strerror`` names the call and the errno ("openat2: ENOSYS (Function not
implemented; Linux 5.6 or later has it)"), since the caller's one line then has to say which call a
kernel or a seccomp filter refused.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
SYS_OPENAT2 = 437
SYS_MOUNT_SETATTR = 442
SYS_FCHMODAT2 = 452
# Where the calls added since Linux 5.1 share one number (asm-generic's): every machine cdictk claims
# (startpath/hooks/hostbinary.py, startpath/hooks/ldcache.py). alpha adds 110 to them and MIPS its ABI's base.
SHARED_NUMBERS = frozenset({"x86_64", "aarch64", "ppc64le", "s390x", "riscv64"})
# bpf(2) came before that: its number per machine (no glibc has a wrapper).
SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351, "riscv64": 280}
RENAME_NOREPLACE = 0x1

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
FSOPEN_CLOEXEC = 0x1
FSMOUNT_CLOEXEC = 0x1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8

PROC_SUPER_MAGIC = 0x9FA0
TMPFS_MAGIC = 0x01021994

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# The first Linux with each call that came late, for the ENOSYS message.
_SINCE = {
    "renameat2": "3.15",
    "open_tree": "5.2",
    "move_mount": "5.2",
    "fsopen": "5.2",
    "fsconfig": "5.2",
    "fsmount": "5.2",
    "openat2": "5.6",
    "mount_setattr": "5.12",
    "fchmodat2": "6.6",
}
_EAGAIN_RETRIES = 16

_libc = ctypes.CDLL(None, use_errno=True)
_char_p, _void_p, _int, _uint, _ulong, _long, _size_t = (
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_ulong,
    ctypes.c_long,
    ctypes.c_size_t,
)
# Structures go as void * (byref): a POINTER type of their own makes each first call slower.
# Declared functions by name: ctypes keeps one function object per name, so each is declared once.
_declared: dict[str, Callable[..., int]] = {}


class SyscallError(OSError):
    """ENOSYS or EPERM from a call: ``strerror`` names the call and the errno; ``errno`` is kept."""


class SyscallRefused(SyscallError, PermissionError):
    """EPERM: still a PermissionError, as ``os`` would raise."""


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


def _function(name: str, restype: Any, *argtypes: Any, number: int | None = None) -> Callable[..., int]:
    """glibc's ``name``, its types declared; with ``number`` (a call some glibc lacks), syscall(2) with
    that number as its first argument where glibc has no ``name``."""
    found = _declared.get(name)
    if found is not None:
        return found
    try:
        function = getattr(_libc, name)
    except AttributeError:
        if number is None:
            raise
        return _syscall(name, number, *argtypes)
    function.restype = restype
    function.argtypes = argtypes
    declared: Callable[..., int] = function
    _declared[name] = declared
    return declared


def _syscall(name: str, numbers: int | dict[str, int], *argtypes: Any) -> Callable[..., int]:
    """syscall(2) for the call ``numbers`` gives (its number on every machine of
    :data:`SHARED_NUMBERS`, or its numbers by machine), with a prototype of its own declaring the
    call's argument types."""
    found = _declared.get(name)
    if found is not None:
        return found
    machine = os.uname().machine
    if isinstance(numbers, dict):
        number = numbers.get(machine)
    else:
        number = numbers if machine in SHARED_NUMBERS else None
    if number is not None:
        raw = ctypes.CFUNCTYPE(_long, _long, *argtypes, use_errno=True)(("syscall", _libc))

        def call(*arguments: Any) -> int:
            return int(raw(number, *arguments))

    else:

        def call(*arguments: Any) -> int:
            _fail(name, errno.ENOSYS, None, f"no syscall number known on {machine}")

    _declared[name] = call
    return call


def _fail(name: str, err: int, path: str | bytes | None, detail: str = "") -> NoReturn:
    """Raise the OSError ``os`` would raise for ``err``; for ENOSYS and EPERM one that names the call."""
    if err == errno.ENOSYS:
        since = _SINCE.get(name)
        detail = detail or (f"Linux {since} or later has it" if since else "")
        reason = f"{name}: ENOSYS ({os.strerror(err)}{'; ' + detail if detail else ''})"
        raise SyscallError(err, reason, path)
    if err == errno.EPERM:
        raise SyscallRefused(err, f"{name}: EPERM ({os.strerror(err)})", path)
    raise OSError(err, os.strerror(err), path)


def _check(result: int, name: str, path: str | bytes | None = None) -> int:
    if result < 0:
        _fail(name, ctypes.get_errno(), path)
    return result


def _path(path: str | bytes | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """openat2(2): the new descriptor (always close-on-exec). EAGAIN, a rename or mount that raced the
    lookup, is retried a bounded number of times."""
    call = _syscall("openat2", SYS_OPENAT2, _int, _char_p, _void_p, _size_t)
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    encoded = os.fsencode(path)
    for _ in range(_EAGAIN_RETRIES):
        fd = call(dirfd, encoded, ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0:
            return int(fd)
        if ctypes.get_errno() != errno.EAGAIN:
            break
    return _fail("openat2", ctypes.get_errno(), path)


def unshare(flags: int) -> None:
    _check(_function("unshare", _int, _int)(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    """setns(2) (``os.setns`` is Python 3.12+). Joining a mount namespace needs a single-threaded caller."""
    _check(_function("setns", _int, _int, _int)(fd, nstype), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2). A bind source given as /proc/self/fd/N must have been opened in the caller's current
    mount namespace: one opened before unshare(CLONE_NEWNS) is refused with EINVAL."""
    call = _function("mount", _int, _char_p, _char_p, _char_p, _ulong, _char_p)
    _check(call(_path(source), _path(target), _path(fstype), flags, _path(data)), "mount", target)


def umount2(target: str, flags: int) -> None:
    _check(_function("umount2", _int, _char_p, _int)(_path(target), flags), "umount2", target)


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2): glibc exports it on every architecture, though no header declares it."""
    call = _function("pivot_root", _int, _char_p, _char_p)
    _check(call(_path(new_root), _path(put_old)), "pivot_root", new_root)


def fchmodat2(dirfd: int, path: str, mode: int, flags: int) -> None:
    """fchmodat2(2), Linux 6.6: chmod an O_PATH descriptor (AT_EMPTY_PATH) without following links.
    glibc's fchmodat is not it: before Linux 6.6 it refuses AT_EMPTY_PATH."""
    call = _syscall("fchmodat2", SYS_FCHMODAT2, _int, _char_p, _uint, _int)
    _check(call(dirfd, _path(path), mode, flags), "fchmodat2", path)


def renameat2(old_dirfd: int, old: str, new_dirfd: int, new: str, flags: int) -> None:
    """renameat2(2): with RENAME_NOREPLACE, EEXIST instead of replacing ``new``, atomically."""
    call = _function("renameat2", _int, _int, _char_p, _int, _char_p, _uint)
    _check(call(old_dirfd, _path(old), new_dirfd, _path(new), flags), "renameat2", new)


def fstatfs_type(fd: int) -> int:
    """The filesystem magic (statfs f_type) of what ``fd`` refers to."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit; f_type comes first
    _check(_function("fstatfs", _int, _int, _void_p)(fd, buf), "fstatfs")
    # f_type is a long everywhere but s390x, where it is a 4-byte unsigned int.
    size = 4 if os.uname().machine == "s390x" else ctypes.sizeof(_long)
    return int.from_bytes(buf.raw[:size], sys.byteorder)


def fsopen(fstype: str) -> int:
    """A new filesystem context's descriptor (close-on-exec)."""
    call = _function("fsopen", _int, _char_p, _uint, number=SYS_FSOPEN)
    return _check(call(_path(fstype), FSOPEN_CLOEXEC), "fsopen", fstype)


def fsconfig(fd: int, command: int, key: str | None = None, value: str | None = None) -> None:
    call = _function("fsconfig", _int, _int, _uint, _char_p, _char_p, _int, number=SYS_FSCONFIG)
    _check(call(fd, command, _path(key), _path(value), 0), "fsconfig")


def fsmount(fd: int, attrs: int) -> int:
    """The detached mount's descriptor (close-on-exec) of the filesystem context ``fd``."""
    call = _function("fsmount", _int, _int, _uint, _uint, number=SYS_FSMOUNT)
    return _check(call(fd, FSMOUNT_CLOEXEC, attrs), "fsmount")


def open_tree(dirfd: int, path: str, flags: int) -> int:
    """open_tree(2): a descriptor (close-on-exec) of the mount at ``path``, or a detached copy of it."""
    call = _function("open_tree", _int, _int, _char_p, _uint, number=SYS_OPEN_TREE)
    return _check(call(dirfd, _path(path), flags | os.O_CLOEXEC), "open_tree", path)


def mount_setattr(
    fd: int, attr_set: int, propagation: int = 0, *, attr_clr: int = 0, recursive: bool = False
) -> None:
    """Set (and clear) attributes on the mount ``fd`` refers to, and every mount below when ``recursive``."""
    call = _function("mount_setattr", _int, _int, _char_p, _uint, _void_p, _size_t, number=SYS_MOUNT_SETATTR)
    attr = _MountAttr(attr_set, attr_clr, propagation, 0)
    flags = AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)
    _check(call(fd, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr")


def move_mount(from_fd: int, to_fd: int) -> None:
    """Attach the detached mount ``from_fd`` onto the file or directory ``to_fd`` refers to."""
    call = _function("move_mount", _int, _int, _char_p, _int, _char_p, _uint, number=SYS_MOVE_MOUNT)
    flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
    _check(call(from_fd, b"", to_fd, b"", flags), "move_mount")


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2)'s result."""
    call = _function("prctl", _int, _int, _ulong, _ulong, _ulong, _ulong)
    return _check(call(option, arg2, arg3, arg4, arg5), "prctl")


def capset(effective: int, permitted: int, inheritable: int) -> None:
    """capset(2) for this thread: the three 64-bit capability sets."""
    call = _function("capset", _int, _void_p, _void_p)
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
    _check(call(header, data), "capset")


def bpf(command: int, attr: ctypes.Structure | ctypes.Union) -> int:
    """bpf(2) with ``attr``, the command's ``union bpf_attr`` member: its result (a descriptor, or 0)."""
    call = _syscall("bpf", SYS_BPF, _int, _void_p, _uint)
    return _check(call(command, ctypes.byref(attr), ctypes.sizeof(attr)), "bpf")
