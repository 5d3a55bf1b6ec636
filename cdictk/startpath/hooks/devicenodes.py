"""The ``disable-device-node-modification`` hook step.

With ``ModifyDeviceFiles: 1`` in ``/proc/driver/nvidia/params``, NVML and nvidia-smi in a container
create (mknod) and chmod NVIDIA device nodes themselves. This step shows the container a copy of the
host's params file with that line set to 0: a one-file, read-only mount over the container's
``/proc/driver/nvidia/params``.

The copy lives on a tmpfs made with the new mount API and never attached anywhere (fsopen, fsmount):
the file is created in it through the mount's descriptor, a detached bind of that single file is
cloned from it (open_tree), made read-only, nosuid, nodev, noexec and private in one step
(mount_setattr), and attached onto the O_PATH descriptor of the target (move_mount). The mount is
never writable or shared where the container can see it, and no path string is used for the target
after it was resolved inside the rootfs. NVIDIA's hook writes its copy to
``<rootfs>/run/nvidia-ctk-hook<uuid>/nvct-params`` on a tmpfs mounted there, and leaves that directory
in the container; this step creates nothing in the rootfs, so it leaves nothing behind.

The target must be a regular file on procfs (``expected_fs``): a file, tmpfs or symlink planted by the
image at that path is refused, so the mount can only cover the driver's own file (the CVE-2025-52881
class of redirected writes and mounts under ``/proc``). Afterwards the path is resolved again and must
be the file just mounted.

runc and crun run createContainer hooks in the container's mount namespace before pivot_root, so the
mount lands in the container alone. Cloning a file out of a detached fsmount() mount needs Linux 6.15;
on older kernels (5.2 and later) a short-lived child process attaches the tmpfs in a private mount
namespace of its own, clones the file there and hands the detached clone back over a socket.
"""

from __future__ import annotations

import errno
import os
import stat

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.fsutil import read_fd
from cdictk.startpath.helpers.rootfs import read_regular_fd
from cdictk.startpath.hooks.steps import Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.startpath.helpers.rootfs import Rootfs

PARAMS = "/proc/driver/nvidia/params"
PROC_SUPER_MAGIC = 0x9FA0  # as syscalls.PROC_SUPER_MAGIC, which is not imported until needed
MAX_PARAMS = 64 * 1024
MODIFY_ON = b"ModifyDeviceFiles: 1"
MODIFY_OFF = b"ModifyDeviceFiles: 0"
_NAME = "params"
_FSMOUNT_ATTRS = 0x2 | 0x4 | 0x8  # MOUNT_ATTR_NOSUID | NODEV | NOEXEC
_MOUNT_ATTRS = 0x1 | _FSMOUNT_ATTRS  # and MOUNT_ATTR_RDONLY


def disable_device_node_modification(
    rootfs: Rootfs, host_params: str = PARAMS, *, expected_fs: int = PROC_SUPER_MAGIC
) -> bool:
    """Mount a copy of ``host_params`` saying ``ModifyDeviceFiles: 0`` over the container's params file.

    Returns True when it mounted; False when there was nothing to do: the host file is missing or does
    not say ``ModifyDeviceFiles: 1``, the container has no ``/proc/driver/nvidia/params``, or that
    file already says ``ModifyDeviceFiles: 0`` (this step ran before). A target that is a symlink, not
    a regular file, or not on a filesystem of type ``expected_fs`` is a HookError.
    """
    host = _read_host_params(host_params)
    if host is None:
        return False
    copy = switched_off(host)
    if copy is None:
        return False
    target = _open_target(rootfs)
    if target is None:
        return False
    try:
        if MODIFY_OFF in _read_target(target).split(b"\n"):
            return False
        _require_fs(target, expected_fs)
        tree = _detached_copy(copy)
        try:
            mounted = os.fstat(tree)
            _move_mount(tree, target)
        finally:
            os.close(tree)
    finally:
        os.close(target)
    _verify(rootfs, mounted, copy)
    return True


def switched_off(params: bytes) -> bytes | None:
    """``params`` with each ``ModifyDeviceFiles: 1`` line set to 0; None if there is no such line."""
    lines = params.split(b"\n")
    if MODIFY_ON not in lines:
        return None
    return b"\n".join(MODIFY_OFF if line == MODIFY_ON else line for line in lines)


def _read_host_params(path: str) -> bytes | None:
    """The host's params file (a trusted host path), or None where the driver is not loaded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HookError(f"disable-device-node-modification: cannot open {path}: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HookError(f"disable-device-node-modification: {path} is not a regular file")
        data = read_fd(fd, MAX_PARAMS)
    except OSError as exc:
        raise HookError(f"disable-device-node-modification: cannot read {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if data is None:
        raise HookError(f"disable-device-node-modification: {path} is larger than {MAX_PARAMS} bytes")
    return data


def _open_target(rootfs: Rootfs) -> int | None:
    """An O_PATH descriptor for the container's params file itself; None if the container has none."""
    try:
        fd = rootfs.open(PARAMS, os.O_PATH, follow=False)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise HookError(
            f"disable-device-node-modification: cannot resolve {PARAMS} in the container: {exc.strerror}"
        ) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise HookError(f"disable-device-node-modification: the container's {PARAMS} is {kind}; refusing it")
    return fd


def _read_target(fd: int) -> bytes:
    try:
        return read_regular_fd(fd, MAX_PARAMS, PARAMS)
    except OSError as exc:
        raise HookError(
            f"disable-device-node-modification: cannot read the container's {PARAMS}: {exc.strerror}"
        ) from exc


def _require_fs(fd: int, expected: int) -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    found = syscalls.fstatfs_type(fd)
    if found != expected:
        raise HookError(
            f"disable-device-node-modification: the container's {PARAMS} is on a filesystem of type "
            f"{found:#x}, not {expected:#x}{' (procfs)' if expected == PROC_SUPER_MAGIC else ''}; "
            "refusing to mount over it"
        )


def _detached_copy(data: bytes) -> int:
    """A detached, read-only, private mount of a one-file tmpfs holding ``data``: its descriptor."""
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    try:
        mnt = _new_tmpfs(len(data))
        try:
            _write_file(mnt, data)
            try:
                tree = syscalls.open_tree(mnt, _NAME, syscalls.OPEN_TREE_CLONE | syscalls.AT_SYMLINK_NOFOLLOW)
            except OSError as exc:
                # Before Linux 6.15 nothing can be cloned out of a mount that was never attached.
                if exc.errno != errno.EINVAL:
                    raise
                tree = _clone_in_private_namespace(mnt)
        finally:
            os.close(mnt)
        try:
            try:
                syscalls.mount_setattr(tree, _MOUNT_ATTRS, syscalls.MS_PRIVATE)
            except OSError as exc:
                # Before Linux 5.12: the clone made by the child is read-only and private already.
                if exc.errno != errno.ENOSYS:
                    raise
            if not os.fstatvfs(tree).f_flag & os.ST_RDONLY:
                raise OSError(errno.EROFS, "the copy could not be made read-only")
        except BaseException:
            os.close(tree)
            raise
    except OSError as exc:  # on ENOSYS, strerror names the call and the Linux that has it
        raise HookError(
            f"disable-device-node-modification: cannot prepare the params copy: {exc.strerror}"
        ) from exc
    return tree


def _new_tmpfs(size: int) -> int:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    fs = syscalls.fsopen("tmpfs")
    try:
        syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "source", "cdictk")
        syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "size", str(size + 8192))
        syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "nr_inodes", "8")
        syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "mode", "0700")
        syscalls.fsconfig(fs, syscalls.FSCONFIG_CMD_CREATE)
        return syscalls.fsmount(fs, _FSMOUNT_ATTRS)
    finally:
        os.close(fs)


def _write_file(mnt: int, data: bytes) -> None:
    fd = os.open(
        _NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444, dir_fd=mnt
    )
    try:
        os.fchmod(fd, 0o444)  # the umask must not decide
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _clone_in_private_namespace(mnt: int) -> int:
    """open_tree(OPEN_TREE_CLONE) of the file, done by a child that attached ``mnt`` in its own namespace.

    The child unshares a mount namespace, makes it wholly private (nothing propagates out), attaches
    the tmpfs over its ``/``, makes it read-only, clones the file and sends the detached clone back.
    Its namespace, with the tmpfs attached there, ends when it exits; the clone lives on.
    """
    import socket  # noqa: PLC0415

    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                syscalls.unshare(syscalls.CLONE_NEWNS)
                syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
                root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                syscalls.move_mount(mnt, root)
                try:
                    syscalls.mount_setattr(mnt, _MOUNT_ATTRS)
                except OSError as exc:
                    if exc.errno != errno.ENOSYS:
                        raise
                    flags = syscalls.MS_REMOUNT | syscalls.MS_BIND | syscalls.MS_RDONLY
                    _require_procfs()
                    syscalls.mount(
                        None,
                        f"/proc/self/fd/{mnt}",
                        None,
                        flags | syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC,
                    )
                tree = syscalls.open_tree(mnt, _NAME, syscalls.OPEN_TREE_CLONE | syscalls.AT_SYMLINK_NOFOLLOW)
                socket.send_fds(theirs, [b"ok"], [tree])
                code = 0
            except BaseException as exc:
                number = exc.errno if isinstance(exc, OSError) and exc.errno else errno.EIO
                theirs.send(str(number).encode())  # if this fails too, the parent sees no answer: EIO
            finally:
                os._exit(code)
        theirs.close()
        try:
            message, fds, _, _ = socket.recv_fds(ours, 32, 1, socket.MSG_CMSG_CLOEXEC)
        finally:
            os.waitpid(pid, 0)
    if fds and message == b"ok":
        return fds[0]
    for fd in fds:
        os.close(fd)
    number = int(message) if message.isdigit() else errno.EIO
    raise OSError(number, os.strerror(number))


def _require_procfs() -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if syscalls.fstatfs_type(proc) != syscalls.PROC_SUPER_MAGIC:
            raise OSError(errno.EXDEV, "/proc is not a procfs")
    finally:
        os.close(proc)


def _move_mount(tree: int, target: int) -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    try:
        syscalls.move_mount(tree, target)
    except OSError as exc:
        raise HookError(
            f"disable-device-node-modification: cannot mount over the container's {PARAMS}: {exc.strerror}"
        ) from exc


def _verify(rootfs: Rootfs, mounted: os.stat_result, data: bytes) -> None:
    """The path, resolved again in the rootfs, must now be the read-only copy."""
    try:
        fd = rootfs.open(PARAMS, os.O_PATH, follow=False)
        try:
            st = os.fstat(fd)
            same = (st.st_dev, st.st_ino) == (mounted.st_dev, mounted.st_ino)
            same = same and read_regular_fd(fd, MAX_PARAMS, PARAMS) == data
            same = same and bool(os.fstatvfs(fd).f_flag & os.ST_RDONLY)
        finally:
            os.close(fd)
    except OSError as exc:
        raise HookError(
            f"disable-device-node-modification: cannot check the container's {PARAMS}: {exc.strerror}"
        ) from exc
    if not same:
        raise HookError(f"disable-device-node-modification: the container's {PARAMS} is not the mounted copy")


def prepare(options: Options) -> Prepared:
    """The disable-device-node-modification step."""

    def run(rootfs: Rootfs) -> None:
        mounted = disable_device_node_modification(rootfs)
        options.log("driver params masked" if mounted else "driver params left alone")

    return Prepared(run)
