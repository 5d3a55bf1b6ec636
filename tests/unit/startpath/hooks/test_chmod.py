"""The chmod hook step: modes set inside the rootfs only, through O_PATH descriptors, links refused."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.startpath.helpers import syscalls
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.chmod import chmod_paths, parse_mode
from tests import REPO


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def rootfs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rootfs]:
    root = tmp_path / "rootfs"
    (root / "dev").mkdir(parents=True)
    (root / "etc").mkdir()
    with Rootfs(str(root), use_openat2=request.param) as opened:
        yield opened


@pytest.fixture
def alarm() -> Iterator[None]:
    """Turn a hang (a FIFO opened for reading) into a failure instead of a stuck test run."""

    def fail(signum: int, frame: object) -> None:
        raise AssertionError("chmod blocked: it opened a FIFO or device")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize(
    ("text", "mode"), [("755", 0o755), ("0755", 0o755), ("0", 0), ("7777", 0o7777), ("04711", 0o4711)]
)
def test_parse_mode_reads_octal(text: str, mode: int) -> None:
    assert parse_mode(text) == mode


@pytest.mark.parametrize(
    "text", ["", "8", "0o755", "-1", "10000", " 755", "755\n", "7_55", "75\u0665", "rwx", "1" * 20]
)
def test_parse_mode_refuses_anything_else(text: str) -> None:
    with pytest.raises(HookError):
        parse_mode(text)


def test_regular_file_and_directory(rootfs: Rootfs) -> None:
    root = Path(rootfs.path)
    (root / "etc" / "file").write_text("x")
    os.chmod(root / "etc" / "file", 0o644)
    (root / "etc" / "dir").mkdir(mode=0o755)
    chmod_paths(rootfs, 0o600, ["/etc/file"])
    chmod_paths(rootfs, 0o2750, ["/etc/dir"])
    assert mode_of(root / "etc" / "file") == 0o600
    assert mode_of(root / "etc" / "dir") == 0o2750


@pytest.mark.root
def test_device_node_and_fifo_are_not_opened(rootfs: Rootfs, alarm: None) -> None:
    root = Path(rootfs.path)
    os.mknod(root / "dev" / "nvidia0", 0o600 | stat.S_IFCHR, os.makedev(195, 0))
    os.mkfifo(root / "dev" / "fifo", 0o600)
    chmod_paths(rootfs, 0o666, ["/dev/nvidia0", "/dev/fifo"])
    assert mode_of(root / "dev" / "nvidia0") == 0o666
    assert stat.S_ISCHR(os.lstat(root / "dev" / "nvidia0").st_mode)
    assert mode_of(root / "dev" / "fifo") == 0o666


@pytest.mark.parametrize("link", ["absolute", "relative"])
def test_final_symlink_to_a_host_file_is_refused(rootfs: Rootfs, tmp_path: Path, link: str) -> None:
    host = tmp_path / "host-secret"
    host.write_text("host")
    os.chmod(host, 0o600)
    target = str(host) if link == "absolute" else "../../host-secret"
    os.symlink(target, Path(rootfs.path) / "dev" / "link")
    (Path(rootfs.path) / "etc" / "file").write_text("x")
    os.chmod(Path(rootfs.path) / "etc" / "file", 0o644)
    with pytest.raises(HookError, match="symbolic link"):
        chmod_paths(rootfs, 0o666, ["/etc/file", "/dev/link"])
    assert mode_of(host) == 0o600
    # Refused before anything changed: the good path listed first kept its mode too.
    assert mode_of(Path(rootfs.path) / "etc" / "file") == 0o644


def test_symlinked_parent_escaping_to_slash_stays_in_the_rootfs(rootfs: Rootfs, tmp_path: Path) -> None:
    host = tmp_path / "host-file"
    host.write_text("host")
    os.chmod(host, 0o600)
    root = Path(rootfs.path)
    os.symlink("/", root / "escape")
    os.symlink("../../../../../../..", root / "etc" / "up")
    # The same path inside the rootfs: that is what must change.
    inside = root / str(host).lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text("inside")
    os.chmod(inside, 0o600)
    chmod_paths(rootfs, 0o640, [f"/escape{host}", f"/etc/up{host}"])
    assert mode_of(host) == 0o600
    assert mode_of(inside) == 0o640
    with pytest.raises(HookError, match=r"without NUL, newline or '\.\.'"):
        chmod_paths(rootfs, 0o644, [f"/escape/..{host}"])


def test_symlinked_parent_to_a_missing_place_is_skipped(rootfs: Rootfs, tmp_path: Path) -> None:
    host = tmp_path / "only-on-host"
    host.write_text("host")
    os.chmod(host, 0o600)
    os.symlink("/", Path(rootfs.path) / "escape")
    chmod_paths(rootfs, 0o666, [f"/escape{host}"])
    assert mode_of(host) == 0o600


def test_matching_mode_is_left_alone(rootfs: Rootfs) -> None:
    path = Path(rootfs.path) / "etc" / "file"
    path.write_text("x")
    os.chmod(path, 0o640)
    before = os.lstat(path)
    time.sleep(0.05)
    chmod_paths(rootfs, 0o640, ["/etc/file"])
    after = os.lstat(path)
    assert after.st_ctime_ns == before.st_ctime_ns
    assert mode_of(path) == 0o640


def test_missing_paths_are_skipped(rootfs: Rootfs) -> None:
    (Path(rootfs.path) / "etc" / "file").write_text("x")
    chmod_paths(rootfs, 0o600, ["/dev/nvidia-missing", "/etc/file/below-a-file", "/etc/file"])
    assert mode_of(Path(rootfs.path) / "etc" / "file") == 0o600


@pytest.mark.parametrize("path", ["dev/nvidia0", "", "/dev/a\nb", "/dev/a\0b"])
def test_bad_paths_are_refused(rootfs: Rootfs, path: str) -> None:
    with pytest.raises(HookError, match="must be absolute"):
        chmod_paths(rootfs, 0o600, [path])


@pytest.mark.parametrize("mode", [-1, 0o10000])
def test_bad_modes_are_refused(rootfs: Rootfs, mode: int) -> None:
    with pytest.raises(HookError, match="outside"):
        chmod_paths(rootfs, mode, ["/etc"])


def test_permission_errors_are_warnings(
    rootfs: Rootfs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """NVIDIA #143: a /dev bind-mounted from the host (EPERM) or read-only (EROFS) must not fail the start."""
    for name in ("a", "b"):
        (Path(rootfs.path) / "etc" / name).write_text("x")
        os.chmod(Path(rootfs.path) / "etc" / name, 0o644)
    calls: list[int] = []

    def refuse_first(fd: int, path: str, mode: int, flags: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        os.chmod(f"/proc/self/fd/{fd}", mode)

    monkeypatch.setattr(syscalls, "fchmodat2", refuse_first)
    chmod_paths(rootfs, 0o600, ["/etc/a", "/etc/b"])
    assert capsys.readouterr().err == "cdictk hook: chmod 600 /etc/a: Read-only file system; ignored\n"
    assert mode_of(Path(rootfs.path) / "etc" / "a") == 0o644
    assert mode_of(Path(rootfs.path) / "etc" / "b") == 0o600


def test_other_errors_fail_the_hook(rootfs: Rootfs, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int, path: str, mode: int, flags: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    (Path(rootfs.path) / "etc" / "a").write_text("x")
    monkeypatch.setattr(syscalls, "fchmodat2", broken)
    with pytest.raises(HookError, match="Input/output error"):
        chmod_paths(rootfs, 0o600, ["/etc/a"])


def test_without_fchmodat2_it_goes_through_a_verified_proc(
    rootfs: Rootfs, monkeypatch: pytest.MonkeyPatch, alarm: None
) -> None:
    calls: list[int] = []

    def missing(fd: int, path: str, mode: int, flags: int) -> None:
        calls.append(fd)
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    root = Path(rootfs.path)
    (root / "etc" / "a").write_text("x")
    (root / "etc" / "b").write_text("x")
    os.mkfifo(root / "dev" / "fifo", 0o600)
    monkeypatch.setattr(syscalls, "fchmodat2", missing)
    chmod_paths(rootfs, 0o604, ["/etc/a", "/etc/b", "/dev/fifo"])
    assert [mode_of(root / "etc" / n) for n in ("a", "b")] == [0o604, 0o604]
    assert mode_of(root / "dev" / "fifo") == 0o604
    assert len(calls) == 1  # ENOSYS is remembered


def test_without_fchmodat2_a_fake_proc_is_refused(rootfs: Rootfs, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(fd: int, path: str, mode: int, flags: int) -> None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    (Path(rootfs.path) / "etc" / "a").write_text("x")
    os.chmod(Path(rootfs.path) / "etc" / "a", 0o644)
    monkeypatch.setattr(syscalls, "fchmodat2", missing)
    monkeypatch.setattr(syscalls, "fstatfs_type", lambda fd: syscalls.TMPFS_MAGIC)
    with pytest.raises(HookError, match="not a procfs"):
        chmod_paths(rootfs, 0o600, ["/etc/a"])
    assert mode_of(Path(rootfs.path) / "etc" / "a") == 0o644


def test_module_imports_no_heavy_standard_module() -> None:
    banned = ("ctypes", "typing", "dataclasses", "re", "json", "subprocess", "enum", "argparse")
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); import cdictk.startpath.hooks.chmod; "
        f"print(','.join(m for m in {banned!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
