"""Driver files bind-mounted read-only into a rootfs from open_tree clones, and what is refused.

Each scenario runs in a forked child in a mount namespace of its own, made private first, so nothing
it mounts can reach the host; the child sends its findings back as JSON through a pipe. Host sources
live on a tmpfs the child mounts (no nodev/noexec of its own), so the flags seen are the hook's.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.prestart.bindmounts import attach_all, clone_sources, close_all

pytestmark = pytest.mark.root

LIB = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
DEADLINE_S = 30.0


def mountinfo() -> str:
    return Path("/proc/self/mountinfo").read_text()


def in_private_mount_namespace(scenario: Callable[[], Any]) -> Any:
    """``scenario()``'s JSON-able result, run in a forked child with a private mount namespace.

    An exception in the child fails the test with the child's traceback; the host's mount table must
    be the same afterwards.
    """
    from cdictk.startpath.helpers import syscalls

    before = mountinfo()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            try:
                syscalls.unshare(syscalls.CLONE_NEWNS)
                syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
                payload = ["ok", scenario()]
            except BaseException:
                payload = ["error", traceback.format_exc()]
            data = memoryview(json.dumps(payload).encode())
            while data:
                data = data[os.write(write_end, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([read_end], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"the scenario gave no answer within {DEADLINE_S} s")
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the child failed: {status}"
    assert mountinfo() == before, "a mount leaked out of the child's namespace"
    kind, value = json.loads(b"".join(chunks))
    if kind == "error":
        raise AssertionError(f"in the child:\n{value}")
    return value


def host_tmpfs(path: Path) -> None:
    """A fresh tmpfs at ``path`` (in the child's namespace): sources with no mount flags of their own."""
    from cdictk.startpath.helpers import syscalls

    path.mkdir(parents=True, exist_ok=True)
    syscalls.mount("tmpfs", str(path), "tmpfs", 0, "mode=0755")


def attach(rootfs: Path, mounts: list[dict[str, Any]]) -> str:
    """Clone and attach ``mounts``; "" or the HookError's message."""
    clones = clone_sources(mounts)
    try:
        with Rootfs(str(rootfs)) as root:
            attach_all(root, clones)
    except HookError as exc:
        return str(exc)
    finally:
        close_all(clones)
    return ""


def flags(path: Path) -> dict[str, bool]:
    f_flag = os.statvfs(path).f_flag
    return {
        "ro": bool(f_flag & os.ST_RDONLY),
        "nosuid": bool(f_flag & os.ST_NOSUID),
        "nodev": bool(f_flag & os.ST_NODEV),
        "noexec": bool(f_flag & os.ST_NOEXEC),
    }


def write_error(path: Path) -> int:
    try:
        with open(path, "r+b") as file:
            file.write(b"evil")
    except OSError as exc:
        return exc.errno or 0
    return 0


def bind(source: Path, destination: str, *options: str) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": str(source), "options": list(options)}


@pytest.mark.parametrize(
    ("options", "nodev", "noexec"),
    [
        (("ro", "nosuid", "bind"), False, False),
        (("ro", "nosuid", "nodev", "bind"), True, False),
        (("rbind", "noexec"), False, True),
        (("bind", "nodev", "noexec"), True, True),
    ],
)
def test_a_file_is_mounted_read_only_at_its_target(
    tmp_path: Path, options: tuple[str, ...], nodev: bool, noexec: bool
) -> None:
    host, rootfs = tmp_path / "host", tmp_path / "rootfs"
    rootfs.mkdir()

    def scenario() -> dict[str, Any]:
        host_tmpfs(host)
        source = host / "libcuda.so.580"
        source.write_bytes(b"driver\n")
        error = attach(rootfs, [bind(source, LIB, *options)])
        target = rootfs / LIB.lstrip("/")
        src, dst = os.stat(source), os.stat(target)
        return {
            "error": error,
            "content": target.read_text(),
            "write": write_error(target),
            "same": [src.st_dev, src.st_ino] == [dst.st_dev, dst.st_ino],
            "flags": flags(target),
            "source_flags": flags(source),
        }

    found = in_private_mount_namespace(scenario)
    assert found["error"] == ""
    assert found["content"] == "driver\n"
    assert found["write"] == errno.EROFS
    assert found["same"]
    assert found["flags"] == {"ro": True, "nosuid": True, "nodev": nodev, "noexec": noexec}
    assert found["source_flags"]["ro"] is False  # the host's own mount stays writable
    # The mount point (and its parents) were made in the rootfs; the mount itself went with the child.
    target = rootfs / LIB.lstrip("/")
    assert target.is_file() and not target.is_symlink() and target.read_bytes() == b""
    assert (rootfs / "usr" / "lib").is_dir()


@pytest.mark.parametrize("recursive", [True, False])
def test_a_directory_and_with_rbind_the_mounts_below_it(tmp_path: Path, recursive: bool) -> None:
    host, rootfs = tmp_path / "host", tmp_path / "rootfs"
    rootfs.mkdir()

    def scenario() -> dict[str, Any]:
        host_tmpfs(host)
        (host / "firmware").mkdir()
        (host / "firmware" / "gsp.bin").write_text("fw")
        host_tmpfs(host / "firmware" / "sub")
        (host / "firmware" / "sub" / "deep.bin").write_text("deep")
        option = "rbind" if recursive else "bind"
        error = attach(rootfs, [bind(host / "firmware", "/lib/firmware/nvidia", option)])
        target = rootfs / "lib" / "firmware" / "nvidia"
        sub = target / "sub"
        return {
            "error": error,
            "file": (target / "gsp.bin").read_text(),
            "sub": sorted(os.listdir(sub)),
            "write": write_error(target / "gsp.bin"),
            "flags": flags(target),
            "sub_ro": flags(sub)["ro"],
        }

    found = in_private_mount_namespace(scenario)
    assert found["error"] == ""
    assert found["file"] == "fw" and found["write"] == errno.EROFS
    assert found["flags"]["ro"] and found["flags"]["nosuid"]
    if recursive:
        assert found["sub"] == ["deep.bin"] and found["sub_ro"]  # read-only below too
    else:
        assert found["sub"] == []  # a plain bind leaves the mount below behind
    assert (rootfs / "lib" / "firmware" / "nvidia").is_dir()


def test_a_symlink_at_the_target_is_refused_and_nothing_mounted(tmp_path: Path) -> None:
    host, rootfs = tmp_path / "host", tmp_path / "rootfs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (rootfs / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (rootfs / LIB.lstrip("/")).symlink_to(outside / "planted")

    def scenario() -> dict[str, Any]:
        host_tmpfs(host)
        (host / "lib").write_text("driver")
        before = mountinfo()
        error = attach(rootfs, [bind(host / "lib", LIB, "ro", "bind")])
        return {"error": error, "mounted": mountinfo() != before}

    found = in_private_mount_namespace(scenario)
    assert found["error"] == f"mount {LIB}: the image has a symlink there; it is not followed"
    assert not found["mounted"]
    assert os.listdir(outside) == []
    assert (rootfs / LIB.lstrip("/")).is_symlink()


def test_a_volume_mounted_at_the_target_is_refused_not_stacked(tmp_path: Path) -> None:
    """Stacking on a volume could propagate the driver file to wherever the volume is shared."""
    host, rootfs, volume = tmp_path / "host", tmp_path / "rootfs", tmp_path / "volume"
    (rootfs / LIB.lstrip("/")).parent.mkdir(parents=True)
    (rootfs / LIB.lstrip("/")).write_text("image")
    volume.write_text("user's volume")

    def scenario() -> dict[str, Any]:
        from cdictk.startpath.helpers import syscalls

        host_tmpfs(host)
        (host / "lib").write_text("driver")
        syscalls.mount(str(volume), str(rootfs / LIB.lstrip("/")), None, syscalls.MS_BIND)
        before = mountinfo()
        error = attach(rootfs, [bind(host / "lib", LIB, "ro", "bind")])
        return {
            "error": error,
            "mounted": mountinfo() != before,
            "seen": (rootfs / LIB.lstrip("/")).read_text(),
        }

    found = in_private_mount_namespace(scenario)
    assert found == {
        "error": f"mount {LIB}: something is mounted there already (a volume?)",
        "mounted": False,
        "seen": "user's volume",
    }


def test_an_image_link_on_the_way_keeps_the_mount_in_the_rootfs(tmp_path: Path) -> None:
    host, rootfs = tmp_path / "host", tmp_path / "rootfs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (rootfs / "usr").mkdir(parents=True)
    (rootfs / "usr" / "lib").symlink_to(outside)  # resolved in the root: rootfs/<outside>

    def scenario() -> dict[str, Any]:
        host_tmpfs(host)
        (host / "lib").write_text("driver")
        error = attach(rootfs, [bind(host / "lib", "/usr/lib/libcuda.so.1", "ro", "bind")])
        inside = rootfs / str(outside).lstrip("/") / "libcuda.so.1"
        return {"error": error, "inside": inside.read_text(), "outside": os.listdir(outside)}

    found = in_private_mount_namespace(scenario)
    assert found == {"error": "", "inside": "driver", "outside": []}


@pytest.mark.parametrize(
    ("source_is_dir", "words"),
    [(False, "the image has a directory there"), (True, "the image has a file there")],
)
def test_a_file_where_a_directory_goes_and_back_is_refused(
    tmp_path: Path, source_is_dir: bool, words: str
) -> None:
    host, rootfs = tmp_path / "host", tmp_path / "rootfs"
    (rootfs / "opt").mkdir(parents=True)
    if source_is_dir:
        (rootfs / "opt" / "x").write_text("image")
    else:
        (rootfs / "opt" / "x").mkdir()

    def scenario() -> dict[str, Any]:
        host_tmpfs(host)
        if source_is_dir:
            (host / "x").mkdir()
        else:
            (host / "x").write_text("driver")
        before = mountinfo()
        return {
            "error": attach(rootfs, [bind(host / "x", "/opt/x", "bind")]),
            "mounted": mountinfo() != before,
        }

    found = in_private_mount_namespace(scenario)
    assert found == {"error": f"mount /opt/x: {words}", "mounted": False}


def test_a_target_on_another_mount_is_refused(tmp_path: Path) -> None:
    """A volume in the rootfs (here a tmpfs) is never written through."""
    host, rootfs = tmp_path / "host", tmp_path / "rootfs"
    (rootfs / "vol").mkdir(parents=True)

    def scenario() -> dict[str, Any]:
        host_tmpfs(host)
        host_tmpfs(rootfs / "vol")
        (host / "lib").write_text("driver")
        error = attach(rootfs, [bind(host / "lib", "/vol/sub/libcuda.so.1", "bind")])
        return {"error": error, "vol": os.listdir(rootfs / "vol")}

    found = in_private_mount_namespace(scenario)
    assert found["error"].startswith(
        "mount /vol/sub/libcuda.so.1: cannot make its directory in the container"
    )
    assert "crosses a mount point" in found["error"] and found["vol"] == []


def test_a_missing_host_source_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-lib.so"

    def scenario() -> str:
        try:
            clone_sources([bind(missing, LIB, "bind")])
        except HookError as exc:
            return str(exc)
        return ""

    assert (
        in_private_mount_namespace(scenario)
        == f"mount {LIB}: host source {missing}: No such file or directory"
    )


@pytest.mark.parametrize(
    ("mount", "words"),
    [
        ({"destination": "/x", "type": "tmpfs", "source": "tmpfs"}, "only bind mounts"),
        ({"destination": "/x", "type": "overlay", "source": "/", "options": ["ro"]}, "only bind mounts"),
        ({"destination": "/x", "type": "bind", "source": "relative"}, "the source must be an absolute"),
        ({"destination": "/x", "type": "bind"}, "the source must be an absolute"),
        (
            {"destination": "x", "type": "bind", "source": "/etc/hostname"},
            "the destination must be an absolute",
        ),
    ],
)
def test_what_is_not_a_host_bind_mount_is_refused(mount: dict[str, Any], words: str) -> None:
    """Refused before any clone is made: no namespace needed."""
    with pytest.raises(HookError, match=words) as info:
        clone_sources([mount])
    assert "\n" not in str(info.value)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_close_all_closes_the_clones_and_a_failure_leaks_none(tmp_path: Path) -> None:
    source = tmp_path / "lib"
    source.write_text("driver")

    def scenario() -> dict[str, Any]:
        before = open_fds()
        clones = clone_sources([bind(source, "/a", "bind"), bind(tmp_path, "/b", "rbind")])
        held = [os.fstat(clone.fd).st_ino for clone in clones]
        directories = [clone.directory for clone in clones]
        close_all(clones)
        closed = []
        for clone in clones:
            try:
                os.fstat(clone.fd)
            except OSError as exc:
                closed.append(exc.errno == errno.EBADF)
        leaked_after_close = sorted(open_fds() - before)
        # The second mount fails: the first one's clone is closed before the error comes out.
        with pytest.raises(HookError, match="missing"):
            clone_sources([bind(source, "/a", "bind"), bind(tmp_path / "missing", "/b", "bind")])
        return {
            "held": held == [os.stat(source).st_ino, os.stat(tmp_path).st_ino],
            "directories": directories,
            "closed": closed,
            "leaked": leaked_after_close,
            "leaked_on_error": sorted(open_fds() - before),
        }

    found = in_private_mount_namespace(scenario)
    assert found == {
        "held": True,
        "directories": [False, True],
        "closed": [True, True],
        "leaked": [],
        "leaked_on_error": [],
    }
