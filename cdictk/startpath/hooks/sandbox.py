"""Run a trusted host program (ldconfig) on a container's rootfs without letting the image reach the host.

The hook runs as root next to an image that controls every byte of the rootfs, so the program must see
nothing but the rootfs, and nothing in the rootfs may lead back out:

* the program runs from a sealed memfd copy, never from its host file, so nothing it does (or anything
  in its namespaces does) can rewrite the host binary through /proc/<pid>/exe (CVE-2019-5736);
* it must be statically linked: a dynamic one would, after pivot_root, load the image's ld.so and
  libc, i.e. run code from the image as root; and it must be built for this machine, or binfmt_misc
  could hand it to an emulator looked up in the rootfs;
* it runs in fresh mount, PID, network, IPC and UTS namespaces, pivoted into a private bind copy of the
  rootfs, so every path it touches, symlinks included, resolves inside the rootfs;
* every procfs under the new root is detached, because its magic links (``/proc/1/root``,
  ``/proc/self/cwd``) point back at the host whatever root we pivoted into;
* it gets an empty environment, /dev/null as stdin and stdout, no other descriptor, resource limits and
  a wall-clock deadline after which its whole PID namespace is killed;
* every mount but the rootfs's own is read-only and every mount nodev (Linux 5.12 and later, which
  have mount_setattr), so links into a volume or host directory mounted in the container lead nowhere
  writable and a device node planted in the image cannot be opened; and the program keeps only
  CAP_DAC_OVERRIDE and CAP_FOWNER, under no_new_privs.

Process layout: the hook forks a *keeper*, which unshares the namespaces and forks the *runner*, PID 1
of the new PID namespace, which sets everything up and execs the program. The keeper owns the deadline
(killing a PID namespace's init kills the namespace), so a hook killed by its runtime still leaves no
process behind for longer than the deadline. Both report to the hook over a close-on-exec pipe, one
line per record: ``E<message>`` (setup failed), ``T`` (deadline passed), ``X<status>`` (exited),
``S<signal>`` (killed by a signal). A successful exec closes the runner's end without a word.
"""

from __future__ import annotations

import errno
import os
import resource
import select
import time

from cdictk.startpath.helpers import mountinfo
from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from cdictk.startpath.helpers.rootfs import Rootfs

# What the program may use: libnvidia-container's limits, with room for a large cache file.
LIMITS = {"CPU": 10, "AS": 1 << 30, "NOFILE": 64, "FSIZE": 64 << 20, "CORE": 0}
GRACE = 5.0  # how much longer than the program's deadline the hook waits for the keeper

_SIGKILL = 9  # the same on every Linux architecture; the signal module would import enum
_CAP_DAC_OVERRIDE = 1
_CAP_FOWNER = 3
_CAP_SETPCAP = 8
_UMOUNT_NOFOLLOW = 0x8
_MAX_REPORT = 1000


def run_in_rootfs(rootfs: Rootfs, exe_fd: int, argv: Sequence[str], *, timeout: float, what: str) -> None:
    """Run the memfd program ``exe_fd`` confined to ``rootfs``; any failure is a HookError."""
    if not timeout > 0:
        raise HookError(f"the {what} timeout must be a positive number of seconds, not {timeout}")
    # ctypes is loaded here, before the fork, so the children import nothing.
    from cdictk.startpath.helpers import syscalls  # noqa: F401, PLC0415

    # The program's stderr goes to a memfd, not a pipe that could fill up and stall it: on failure, its
    # last line joins our one-line error; on success its chatter is not the runtime's business.
    errlog = os.memfd_create(f"{what}-stderr", os.MFD_CLOEXEC)
    read_end, write_end = os.pipe()
    try:
        try:
            pid = os.fork()
        except OSError as exc:
            raise HookError(f"cannot start {what}: fork: {exc.strerror}") from None
        if pid == 0:
            _keeper_process(rootfs, exe_fd, list(argv), timeout, write_end, errlog=errlog)
        os.close(write_end)
        write_end = -1
        status = _wait_for(pid, timeout + GRACE)
        records = _read_available(read_end)
        said = _last_line(errlog)
    finally:
        os.close(read_end)
        os.close(errlog)
        if write_end >= 0:
            os.close(write_end)
    _raise_for_outcome(records, status, what, timeout, said)


def _last_line(fd: int) -> str:
    size = os.fstat(fd).st_size
    tail = os.pread(fd, 4096, max(0, size - 4096))
    lines = [line for line in tail.decode(errors="replace").splitlines() if line.strip()]
    return " ".join(lines[-1].split())[:_MAX_REPORT] if lines else ""


def _raise_for_outcome(
    records: list[bytes], status: int | None, what: str, timeout: float, said: str
) -> None:
    for record in records:
        if record.startswith(b"E"):
            raise HookError(f"cannot run {what} in the container: {record[1:].decode(errors='replace')}")
    if status is None or b"T" in records:
        raise HookError(f"{what} timed out after {timeout:g} s")
    because = f" ({said})" if said else ""
    for record in records:
        if record.startswith(b"X") and record[1:].isdigit():
            code = int(record[1:])
            if code == 0:
                return
            raise HookError(f"{what} failed with exit status {code}{because}")
        if record.startswith(b"S") and record[1:].isdigit():
            raise HookError(f"{what} was killed by signal {int(record[1:])}{because}")
    raise HookError(f"{what} sandbox ended without a result (wait status {status})")


def _read_available(fd: int) -> list[bytes]:
    """The records already in the pipe; never waits for a runner that might still hold its end."""
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    return b"".join(chunks).splitlines()


def _wait_for(pid: int, timeout: float) -> int | None:
    """The wait status of child ``pid``; None when ``timeout`` passed first and the child was killed."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # Linux before 5.3
        return _wait_by_polling(pid, timeout)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            _kill_and_reap(pid)
            return None
    except BaseException:
        _kill_and_reap(pid)
        raise
    finally:
        os.close(pidfd)
    return os.waitpid(pid, 0)[1]


def _wait_by_polling(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() >= deadline:
                _kill_and_reap(pid)
                return None
            time.sleep(0.005)
    except BaseException:
        _kill_and_reap(pid)
        raise


def _kill_and_reap(pid: int) -> None:
    try:
        os.kill(pid, _SIGKILL)  # safe: a child we have not reaped keeps its pid
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# Inside the children: plain system calls only, and never a return into the hook's Python code.


def _keeper_process(
    rootfs: Rootfs, exe_fd: int, argv: list[str], timeout: float, report: int, *, errlog: int
) -> None:
    # The read end stays open here (harmless: only write ends decide end-of-file); the runner closes it.
    code = 1
    try:
        code = _keeper(rootfs, exe_fd, argv, timeout, report, errlog=errlog)
    except BaseException as exc:
        _report(report, b"E", _describe("namespaces", exc))
    finally:
        os._exit(code)


def _keeper(rootfs: Rootfs, exe_fd: int, argv: list[str], timeout: float, report: int, *, errlog: int) -> int:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415 - already loaded by the parent

    syscalls.unshare(
        syscalls.CLONE_NEWNS
        | syscalls.CLONE_NEWPID
        | syscalls.CLONE_NEWNET
        | syscalls.CLONE_NEWIPC
        | syscalls.CLONE_NEWUTS
    )
    pid = os.fork()
    if pid == 0:
        _runner_process(rootfs, exe_fd, argv, report, errlog=errlog)
    os.close(exe_fd)
    status = _wait_for(pid, timeout)
    if status is None:
        _report(report, b"T", "")
    elif os.WIFSIGNALED(status):
        _report(report, b"S", str(os.WTERMSIG(status)))
    else:
        _report(report, b"X", str(os.waitstatus_to_exitcode(status)))
    return 0


def _runner_process(rootfs: Rootfs, exe_fd: int, argv: list[str], report: int, *, errlog: int) -> None:
    step = ["starting"]
    try:
        _confine_and_exec(rootfs, exe_fd, argv, report, step, errlog=errlog)
    except BaseException as exc:
        _report(report, b"E", _describe(step[0], exc))
    finally:
        os._exit(127)


def _confine_and_exec(
    rootfs: Rootfs, exe_fd: int, argv: list[str], report: int, step: list[str], *, errlog: int
) -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    step[0] = "making mounts private"
    # Nothing mounted or unmounted from here on may propagate to the host or to the container.
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    step[0] = "opening host descriptors"
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    # Kept across pivot_root to read our mount table afterwards, then closed before the exec.
    proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    if syscalls.fstatfs_type(proc) != syscalls.PROC_SUPER_MAGIC:
        raise OSError(errno.EINVAL, "the host's /proc is not procfs")
    _close_inherited_descriptors(proc, keep={0, 1, 2, devnull, proc, exe_fd, report, rootfs.fd, errlog})
    step[0] = f"entering the rootfs {rootfs.path}"
    _pivot_into(rootfs)
    step[0] = "detaching procfs mounts in the rootfs"
    _detach_procfs(proc)
    os.close(proc)
    _restrict_mounts()
    step[0] = "preparing standard streams and limits"
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(errlog, 2)
    os.close(devnull)
    _set_limits()
    step[0] = "dropping capabilities"
    _drop_capabilities()
    step[0] = "exec"
    os.execve(exe_fd, argv, {})  # noqa: S606 - a checked, sealed host binary with an empty environment


def _close_inherited_descriptors(proc: int, keep: set[int]) -> None:
    """Close whatever the hook inherited without close-on-exec (CVE-2024-21626 is a leaked fd)."""
    listing = os.open("self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc)
    try:
        names = os.listdir(listing)
    finally:
        os.close(listing)
    for name in names:
        fd = int(name)
        if fd not in keep:
            try:  # noqa: SIM105 - contextlib is one more import on every container start
                os.close(fd)
            except OSError:
                pass  # the descriptor the listing itself used, already closed


def _pivot_into(rootfs: Rootfs) -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    # A recursive bind keeps the runtime's mounts (the driver libraries CDI bind-mounts in) and makes
    # the rootfs a mount point, which pivot_root needs even when it is a plain directory. The path is
    # the runtime's, not the image's; the bind cannot take the opened descriptor as its source, as that
    # belongs to the mount namespace we just left (EINVAL), so the result is checked against it instead.
    syscalls.mount(rootfs.path, rootfs.path, None, syscalls.MS_BIND | syscalls.MS_REC)
    os.chdir(rootfs.path)
    here, opened = os.stat("."), os.fstat(rootfs.fd)
    if (here.st_dev, here.st_ino) != (opened.st_dev, opened.st_ino):
        raise OSError(errno.ESTALE, "the rootfs path no longer names the opened rootfs")
    syscalls.pivot_root(".", ".")
    # The old root is now stacked on ".": detaching it leaves no way back to the host's tree.
    syscalls.umount2(".", syscalls.MNT_DETACH)
    os.chdir("/")


def _detach_procfs(proc: int) -> None:
    """Detach every procfs mount under the new root, deepest first."""
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    for _ in range(8):
        mounts = _read_mounts(proc)
        found = sorted({point for point, fstype in mounts if fstype == "proc"}, key=_depth, reverse=True)
        if not found:
            return
        for point in found:
            if point == "/":
                raise OSError(errno.EINVAL, "the rootfs itself is on procfs")
            try:
                # Detaching takes everything mounted below it too; a mount stacked on top of this one
                # goes first and the next round meets the procfs it covered.
                syscalls.umount2(point, syscalls.MNT_DETACH | _UMOUNT_NOFOLLOW)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOENT):
                    raise
    raise OSError(errno.EBUSY, "procfs is still mounted at " + ", ".join(found))


def _restrict_mounts() -> None:
    """Make every mount under the new root read-only, nodev and nosuid, then the root itself writable.

    ldconfig writes the cache and SONAME links in the rootfs's own filesystem; a volume or host
    directory the runtime mounted into the container (a CDI spec's IPC directories, user volumes)
    must stay out of its reach even when the image links /etc or a library directory into one, and
    a device node from the image cannot be opened. Before Linux 5.12 (no mount_setattr) the program
    runs without this layer; the capabilities dropped before the exec still hold.
    """
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        locked = syscalls.MOUNT_ATTR_RDONLY | syscalls.MOUNT_ATTR_NODEV | syscalls.MOUNT_ATTR_NOSUID
        syscalls.mount_setattr(root, locked, recursive=True)
        syscalls.mount_setattr(root, 0, attr_clr=syscalls.MOUNT_ATTR_RDONLY)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
    finally:
        os.close(root)


def _drop_capabilities() -> None:
    """Keep only what ldconfig needs to write root's files, and make that final across the exec.

    Root regains its bounding set on exec, so the bounding set is what must shrink: no CAP_SYS_ADMIN
    (no mount, no fresh procfs, no way back out), no CAP_DAC_READ_SEARCH (open_by_handle_at), no
    CAP_MKNOD, CAP_SYS_MODULE or CAP_SYS_PTRACE, whatever an ldconfig tricked by a crafted library
    would try. no_new_privs forbids regaining any through a set-uid or file-capability binary.
    """
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    keep = (1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_FOWNER)
    for cap in [*range(_CAP_SETPCAP), *range(_CAP_SETPCAP + 1, 64), _CAP_SETPCAP]:
        if keep & (1 << cap):
            continue
        try:
            syscalls.prctl(syscalls.PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # a capability this kernel does not have
                raise
    syscalls.capset(keep, keep, 0)
    syscalls.prctl(syscalls.PR_CAP_AMBIENT, syscalls.PR_CAP_AMBIENT_CLEAR_ALL)
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)


def _read_mounts(proc: int) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of the mounts visible under our root, from mountinfo.

    Opened after pivot_root, mountinfo lists exactly the mounts under the new root, by their paths in it.
    """
    fd = os.open("self/mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
    try:
        mounts = mountinfo.read(fd)
    except ValueError as exc:
        raise OSError(errno.EINVAL, str(exc)) from None
    finally:
        os.close(fd)
    return [(mount.mountpoint, mount.fstype) for mount in mounts]


def _depth(path: str) -> int:
    return path.count("/")


def _set_limits() -> None:
    for name, value in LIMITS.items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))


def _report(fd: int, kind: bytes, text: str) -> None:
    line = kind + " ".join(text.split()).encode("utf-8", "replace")[:_MAX_REPORT] + b"\n"
    try:
        os.write(fd, line)  # below PIPE_BUF: one atomic write
    except OSError:
        os.write(2, b"cdictk sandbox: " + line)


def _describe(step: str, exc: BaseException) -> str:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{step}: {exc.strerror or exc}{where}"
    return f"{step}: {type(exc).__name__}: {exc}"
