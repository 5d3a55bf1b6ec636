"""cdictk.startpath.helpers.syscalls: real calls where this machine allows them, and the error paths on a stubbed libc.

What changes the process (namespaces, mounts, pivot_root, capabilities) runs in a forked child that
first unshares a mount namespace of its own, so the test process and the host keep theirs.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers import syscalls
from cdictk.startpath.helpers.rootfs import Rootfs

AT_FDCWD = -100
NEW_MOUNT_API = ("open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "mount_setattr")


@pytest.fixture(autouse=True)
def fresh_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test declares the functions it calls anew: the stubs below must not outlive their test."""
    monkeypatch.setattr(syscalls, "_declared", {})


def in_child(work: Callable[[], Any]) -> Any:
    """What ``work`` returns (JSON), run in a forked child in a private mount namespace of its own;
    its exception's last line, raised here as an AssertionError."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe and exits
        code = 0
        try:
            os.close(read_end)
            syscalls.unshare(syscalls.CLONE_NEWNS)
            syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
            answer = json.dumps({"ok": work()})
        except BaseException:
            answer = json.dumps({"error": traceback.format_exc().strip().splitlines()[-1]})
            code = 1
        try:
            os.write(write_end, answer.encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = json.loads(pipe.read() or b'{"error": "the child said nothing"}')
    os.waitpid(pid, 0)
    if "error" in answer:
        raise AssertionError(answer["error"])
    return answer["ok"]


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A rootfs with an escaping absolute link, a relative one that climbs, and the root's fd."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("inside\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "up").symlink_to("/")
    (tmp_path / "lib" / "climb").symlink_to("../../../../etc/passwd")
    root = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield tmp_path, root
    finally:
        os.close(root)


def read(fd: int) -> str:
    try:
        return Path(f"/proc/self/fd/{fd}").read_text()
    finally:
        os.close(fd)


def require_openat2(root: int) -> None:
    try:
        os.close(syscalls.openat2(root, ".", os.O_PATH, 0, syscalls.RESOLVE_IN_ROOT))
    except syscalls.SyscallError as exc:
        pytest.skip(f"this kernel has no openat2 for the tests: {exc.strerror}")


# openat2


def test_openat2_resolves_links_inside_the_root(tree: tuple[Path, int]) -> None:
    _, root = tree
    require_openat2(root)
    resolve = syscalls.RESOLVE_IN_ROOT | syscalls.RESOLVE_NO_MAGICLINKS
    assert read(syscalls.openat2(root, "lib/up/etc/passwd", os.O_RDONLY, 0, resolve)) == "inside\n"
    assert read(syscalls.openat2(root, "lib/climb", os.O_RDONLY, 0, resolve)) == "inside\n"
    assert read(syscalls.openat2(root, "/../../etc/passwd", os.O_RDONLY, 0, resolve)) == "inside\n"


def test_openat2_descriptors_are_close_on_exec(tree: tuple[Path, int]) -> None:
    _, root = tree
    require_openat2(root)
    fd = syscalls.openat2(root, "etc", os.O_PATH, 0, syscalls.RESOLVE_IN_ROOT)
    try:
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


def test_openat2_creates_with_the_mode_given(tree: tuple[Path, int]) -> None:
    path, root = tree
    require_openat2(root)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    os.close(syscalls.openat2(root, "lib/up/etc/new", flags, 0o600, syscalls.RESOLVE_IN_ROOT))
    assert stat.S_IMODE((path / "etc" / "new").stat().st_mode) == 0o600 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_openat2_errors_are_os_errors_with_the_path(tree: tuple[Path, int]) -> None:
    _, root = tree
    require_openat2(root)
    with pytest.raises(FileNotFoundError) as caught:
        syscalls.openat2(root, "etc/missing", os.O_RDONLY, 0, syscalls.RESOLVE_IN_ROOT)
    assert (caught.value.errno, caught.value.filename) == (errno.ENOENT, "etc/missing")
    assert not isinstance(caught.value, syscalls.SyscallError)


def test_openat2_retries_eagain_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [-1, -1, 7]

    def racing(*_: object) -> int:
        ctypes.set_errno(errno.EAGAIN)
        return answers.pop(0)

    monkeypatch.setitem(syscalls._declared, "openat2", racing)
    assert syscalls.openat2(3, "x", os.O_PATH, 0, 0) == 7

    calls = []

    def always_racing(*_: object) -> int:
        calls.append(1)
        ctypes.set_errno(errno.EAGAIN)
        return -1

    monkeypatch.setitem(syscalls._declared, "openat2", always_racing)
    with pytest.raises(BlockingIOError):
        syscalls.openat2(3, "x", os.O_PATH, 0, 0)
    assert len(calls) == syscalls._EAGAIN_RETRIES


# ENOSYS and EPERM name the call


def failing(err: int) -> Callable[..., int]:
    def call(*_: object) -> int:
        ctypes.set_errno(err)
        return -1

    return call


def test_enosys_names_the_call_and_the_linux_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(syscalls._declared, "openat2", failing(errno.ENOSYS))
    with pytest.raises(syscalls.SyscallError) as caught:
        syscalls.openat2(3, "etc", os.O_PATH, 0, 0)
    assert caught.value.errno == errno.ENOSYS
    assert caught.value.strerror == "openat2: ENOSYS (Function not implemented; Linux 5.6 or later has it)"
    assert caught.value.filename == "etc"
    assert isinstance(caught.value, OSError)


def test_enosys_of_an_old_call_names_it_without_a_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(syscalls._declared, "unshare", failing(errno.ENOSYS))
    with pytest.raises(syscalls.SyscallError) as caught:
        syscalls.unshare(syscalls.CLONE_NEWNS)
    assert caught.value.strerror == "unshare: ENOSYS (Function not implemented)"


def test_eperm_names_the_call_and_stays_a_permission_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(syscalls._declared, "mount", failing(errno.EPERM))
    with pytest.raises(PermissionError) as caught:
        syscalls.mount(None, "/target", None, syscalls.MS_REMOUNT)
    assert isinstance(caught.value, syscalls.SyscallRefused)
    assert caught.value.errno == errno.EPERM
    assert caught.value.strerror == "mount: EPERM (Operation not permitted)"
    assert caught.value.filename == "/target"


def test_other_errors_are_what_os_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(syscalls._declared, "move_mount", failing(errno.ENOENT))
    with pytest.raises(FileNotFoundError) as caught:
        syscalls.move_mount(3, 4)
    assert caught.value.strerror == os.strerror(errno.ENOENT)
    assert not isinstance(caught.value, syscalls.SyscallError)


def test_a_machine_of_other_numbers_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.uname()
    fake = os.uname_result((real.sysname, real.nodename, real.release, real.version, "mips64"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    with pytest.raises(syscalls.SyscallError) as caught:
        syscalls.fchmodat2(3, "", 0o644, syscalls.AT_EMPTY_PATH)
    assert caught.value.errno == errno.ENOSYS
    expected = "fchmodat2: ENOSYS (Function not implemented; no syscall number known on mips64)"
    assert caught.value.strerror == expected


def test_the_rootfs_walks_where_openat2_has_no_number(
    tree: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its caller reads that refusal as a kernel without openat2, and resolves by walking instead."""
    path, _ = tree
    real = os.uname()
    fake = os.uname_result((real.sysname, real.nodename, real.release, real.version, "alpha"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    with Rootfs(str(path)) as rootfs:
        assert read(rootfs.open("lib/up/etc/passwd", os.O_RDONLY)) == "inside\n"


def test_every_function_has_its_argument_types_declared() -> None:
    with pytest.raises(ctypes.ArgumentError):
        syscalls.unshare("not a number")  # type: ignore[arg-type]
    with pytest.raises(ctypes.ArgumentError):
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, "one")  # type: ignore[arg-type]
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        syscalls.fstatfs_type(fd)
    finally:
        os.close(fd)
    fstatfs = syscalls._libc.fstatfs
    assert (fstatfs.restype, fstatfs.argtypes) == (ctypes.c_int, (ctypes.c_int, ctypes.c_void_p))


# glibc's wrappers, and syscall(2) where glibc lacks them


class GlibcBefore236(ctypes.CDLL):
    """glibc as before 2.36: no wrapper for the new mount API."""

    def __getattr__(self, name: str) -> Any:
        if name in NEW_MOUNT_API:
            raise AttributeError(name)
        return super().__getattr__(name)


@pytest.fixture(params=["glibc", "syscall"])
def libc(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "syscall":
        monkeypatch.setattr(syscalls, "_libc", GlibcBefore236(None, use_errno=True))
    elif not hasattr(syscalls._libc, "open_tree"):
        pytest.skip("this glibc (before 2.36) has no wrapper for the new mount API")
    return str(request.param)


def test_the_new_mount_api_declares_the_wrappers_or_falls_back(libc: str, tmp_path: Path) -> None:
    fd = syscalls.open_tree(AT_FDCWD, str(tmp_path), 0)  # no clone: a descriptor of the path
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path))
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)
    declared = syscalls._declared["open_tree"]
    assert hasattr(declared, "argtypes") == (libc == "glibc")  # a C function, or the syscall(2) closure


@pytest.mark.root
def test_a_read_only_tmpfs_attached_by_descriptor(libc: str, tmp_path: Path) -> None:
    """fsopen, fsconfig, fsmount, mount_setattr, open_tree and move_mount, as the hooks use them."""
    target = tmp_path / "target"
    target.mkdir()

    def work() -> dict[str, Any]:
        fs = syscalls.fsopen("tmpfs")
        try:
            syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "size", "65536")
            syscalls.fsconfig(fs, syscalls.FSCONFIG_CMD_CREATE)
            mnt = syscalls.fsmount(fs, syscalls.MOUNT_ATTR_NOSUID)
        finally:
            os.close(fs)
        os.close(os.open("file", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=mnt))
        syscalls.mount_setattr(
            mnt, syscalls.MOUNT_ATTR_RDONLY | syscalls.MOUNT_ATTR_NODEV, syscalls.MS_PRIVATE
        )
        where = os.open(target, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        syscalls.move_mount(mnt, where)
        clone = syscalls.open_tree(AT_FDCWD, str(target), syscalls.OPEN_TREE_CLONE)
        return {
            "listed": os.listdir(target),
            "readonly": bool(os.statvfs(target).f_flag & os.ST_RDONLY),
            "nodev": bool(os.statvfs(target).f_flag & os.ST_NODEV),
            "tmpfs": syscalls.fstatfs_type(clone) == syscalls.TMPFS_MAGIC,
        }

    assert in_child(work) == {"listed": ["file"], "readonly": True, "nodev": True, "tmpfs": True}
    assert os.listdir(target) == []  # the mount went with the child's namespace


@pytest.mark.root
def test_mount_setattr_recursive_and_cleared(tmp_path: Path) -> None:
    (tmp_path / "top").mkdir()

    def work() -> list[bool]:
        top = str(tmp_path / "top")
        syscalls.mount("tmpfs", top, "tmpfs", 0, "size=64k")
        os.mkdir(f"{top}/below")
        syscalls.mount("tmpfs", f"{top}/below", "tmpfs", 0, "size=64k")
        fd = syscalls.open_tree(AT_FDCWD, top, 0)
        syscalls.mount_setattr(fd, syscalls.MOUNT_ATTR_RDONLY, recursive=True)
        seen = [bool(os.statvfs(p).f_flag & os.ST_RDONLY) for p in (top, f"{top}/below")]
        syscalls.mount_setattr(fd, 0, attr_clr=syscalls.MOUNT_ATTR_RDONLY)
        return [*seen, bool(os.statvfs(top).f_flag & os.ST_RDONLY)]

    assert in_child(work) == [True, True, False]


# namespaces, mounts, pivot_root


@pytest.mark.root
def test_mount_umount2_and_pivot_root(tmp_path: Path) -> None:
    new_root = tmp_path / "new"
    new_root.mkdir()

    def work() -> list[str]:
        syscalls.mount("tmpfs", str(new_root), "tmpfs", 0, "size=64k")
        (new_root / "marker").write_text("")
        os.chdir(new_root)
        syscalls.pivot_root(".", ".")
        syscalls.umount2(".", syscalls.MNT_DETACH)
        os.chdir("/")
        return sorted(os.listdir("/"))

    assert in_child(work) == ["marker"]


@pytest.mark.root
def test_mount_errors_name_the_target(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")

    def work() -> list[Any]:
        try:
            syscalls.mount("tmpfs", missing, "tmpfs", 0)
        except FileNotFoundError as exc:
            return [exc.errno, exc.filename]
        return []

    assert in_child(work) == [errno.ENOENT, missing]


@pytest.mark.root
def test_setns_joins_a_namespace_again() -> None:

    def work() -> bool:
        before = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        syscalls.unshare(syscalls.CLONE_NEWNS)
        moved = os.stat("/proc/self/ns/mnt").st_ino != os.fstat(before).st_ino
        syscalls.setns(before, syscalls.CLONE_NEWNS)
        return moved and os.stat("/proc/self/ns/mnt").st_ino == os.fstat(before).st_ino

    assert in_child(work) is True


@pytest.mark.root
def test_capset_and_prctl_drop_what_they_name() -> None:

    def work() -> dict[str, str]:
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
        syscalls.prctl(syscalls.PR_CAP_AMBIENT, syscalls.PR_CAP_AMBIENT_CLEAR_ALL)
        keep = 1 << 21 | 1 << 33  # CAP_SYS_ADMIN, and one past the first word (CAP_MAC_ADMIN)
        syscalls.capset(keep, keep, 0)
        status = Path("/proc/self/status").read_text().splitlines()
        return dict(line.split(":\t", 1) for line in status if line.startswith(("CapEff", "NoNewPrivs")))

    assert in_child(work) == {"CapEff": f"{1 << 21 | 1 << 33:016x}", "NoNewPrivs": "1"}


# files


def test_fchmodat2_changes_the_mode_through_an_o_path_descriptor(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("")
    target.chmod(0o600)
    fd = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            syscalls.fchmodat2(fd, "", 0o640, syscalls.AT_EMPTY_PATH)
        except syscalls.SyscallError as exc:
            pytest.skip(f"this kernel has no fchmodat2 (Linux 6.6): {exc.strerror}")
    finally:
        os.close(fd)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_renameat2_noreplace_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    with pytest.raises(FileExistsError):
        syscalls.renameat2(
            AT_FDCWD, str(tmp_path / "a"), AT_FDCWD, str(tmp_path / "b"), syscalls.RENAME_NOREPLACE
        )
    assert (tmp_path / "b").read_text() == "b"
    syscalls.renameat2(
        AT_FDCWD, str(tmp_path / "a"), AT_FDCWD, str(tmp_path / "c"), syscalls.RENAME_NOREPLACE
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "c"]


def test_fstatfs_type_tells_procfs_from_the_rest(tmp_path: Path) -> None:
    proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    here = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        assert syscalls.fstatfs_type(proc) == syscalls.PROC_SUPER_MAGIC
        assert syscalls.fstatfs_type(here) != syscalls.PROC_SUPER_MAGIC
    finally:
        os.close(proc)
        os.close(here)
    with pytest.raises(OSError) as caught:
        syscalls.fstatfs_type(here)  # closed
    assert caught.value.errno == errno.EBADF
