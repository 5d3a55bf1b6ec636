"""Path resolution confined to a rootfs, with openat2 and with the descriptor walk, against image links."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.startpath.helpers.rootfs import Rootfs


@pytest.fixture(params=["openat2", "walk"])
def make_rootfs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Path, Rootfs]]:
    """(rootfs dir, a host dir outside it, the opened Rootfs)."""
    root = tmp_path / "rootfs"
    host = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("container\n")
    host.mkdir()
    (host / "passwd").write_text("host\n")
    rootfs = Rootfs(str(root), use_openat2=request.param == "openat2")
    with rootfs:
        yield root, host, rootfs


def where(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def test_absolute_link_to_root_resolves_inside(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, _, rootfs = make_rootfs
    (root / "lib").mkdir()
    (root / "lib" / "foo").symlink_to("/")
    assert where(rootfs.open("/lib/foo/etc/passwd")) == f"{root}/etc/passwd"
    assert rootfs.read_regular("/lib/foo/etc/passwd", 100) == b"container\n"


def test_dotdot_never_climbs_above_the_root(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, _, rootfs = make_rootfs
    assert where(rootfs.open("../../../etc/passwd")) == f"{root}/etc/passwd"
    (root / "a").mkdir()
    (root / "a" / "up").symlink_to("../../../../../etc")
    assert where(rootfs.open("/a/up/passwd")) == f"{root}/etc/passwd"


def test_absolute_link_to_a_host_path_is_read_as_a_rootfs_path(
    make_rootfs: tuple[Path, Path, Rootfs],
) -> None:
    root, host, rootfs = make_rootfs
    (root / "escape").symlink_to(host / "passwd")
    with pytest.raises(FileNotFoundError):
        rootfs.open("/escape")
    (root / "proc-root").symlink_to("/proc/self/root/etc/passwd")  # a magic link's path, as a string
    with pytest.raises(FileNotFoundError):
        rootfs.open("/proc-root")


def test_link_loops_end_in_eloop(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, _, rootfs = make_rootfs
    (root / "x").symlink_to("y")
    (root / "y").symlink_to("x")
    with pytest.raises(OSError) as info:
        rootfs.open("/x")
    assert info.value.errno == errno.ELOOP


def test_final_link_is_kept_when_asked(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, host, rootfs = make_rootfs
    (root / "link").symlink_to(host / "passwd")
    fd = rootfs.open("/link", os.O_PATH, follow=False)
    try:
        assert stat.S_ISLNK(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_write_file_replaces_a_planted_symlink_and_never_follows_it(
    make_rootfs: tuple[Path, Path, Rootfs],
) -> None:
    root, host, rootfs = make_rootfs
    (root / "etc" / "ld.so.conf.d").mkdir()
    planted = root / "etc" / "ld.so.conf.d" / "00-x.conf"
    planted.symlink_to(host / "passwd")
    assert rootfs.write_file("/etc/ld.so.conf.d/00-x.conf", b"/usr/lib\n")
    assert (host / "passwd").read_text() == "host\n"
    assert not planted.is_symlink() and planted.read_bytes() == b"/usr/lib\n"
    assert stat.S_IMODE(planted.stat().st_mode) == 0o644
    assert not rootfs.write_file("/etc/ld.so.conf.d/00-x.conf", b"/usr/lib\n")  # idempotent
    assert sorted(os.listdir(planted.parent)) == ["00-x.conf"]  # no temporary left behind


def test_symlinked_directory_to_the_host_is_followed_inside(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    """CVE-2024-0134: an image directory link such as /usr/lib64 -> /etc must not put files on the host."""
    root, host, rootfs = make_rootfs
    (root / "usr").mkdir()
    (root / "usr" / "lib64").symlink_to("/etc")
    assert rootfs.symlink("libcuda.so.1", "/usr/lib64/libcuda.so")
    assert not os.path.lexists("/etc/libcuda.so")
    assert os.readlink(root / "etc" / "libcuda.so") == "libcuda.so.1"
    (root / "usr" / "lib32").symlink_to(host)  # missing inside: made inside, never on the host
    assert rootfs.symlink("libcuda.so.1", "/usr/lib32/libcuda.so")
    assert sorted(os.listdir(host)) == ["passwd"]
    assert os.path.islink(root / str(host).lstrip("/") / "libcuda.so")


def test_mkdirs_through_a_dangling_link_creates_its_target_inside(
    make_rootfs: tuple[Path, Path, Rootfs],
) -> None:
    root, host, rootfs = make_rootfs
    (root / "run").symlink_to(host / "missing")
    os.close(rootfs.mkdirs("/run/a/b"))
    assert not (host / "missing").exists()
    assert (root / str(host).lstrip("/") / "missing" / "a" / "b").is_dir()
    (root / "etc" / "conf.d").symlink_to("../srv/../opt/conf")
    os.close(rootfs.mkdirs("/etc/conf.d"))
    assert (root / "opt" / "conf").is_dir() and (root / "srv").is_dir()  # as mkdir -p would
    os.close(rootfs.mkdirs("/var/lib/x"))
    assert (root / "var" / "lib" / "x").is_dir()
    (root / "loop1").symlink_to("loop2/x")
    (root / "loop2").symlink_to("loop1/y")
    with pytest.raises(OSError):
        rootfs.mkdirs("/loop1")
    (root / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        rootfs.mkdirs("/file/sub")


def test_create_exclusive_does_not_follow_a_dangling_link(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, host, rootfs = make_rootfs
    (root / "etc" / "ld.so.conf").symlink_to(host / "created-by-hook")
    assert not rootfs.create_exclusive("/etc/ld.so.conf", b"include x\n")
    assert not (host / "created-by-hook").exists()
    assert rootfs.create_exclusive("/etc/new.conf", b"x\n")
    assert not rootfs.create_exclusive("/etc/new.conf", b"y\n")
    assert (root / "etc" / "new.conf").read_bytes() == b"x\n"


def test_symlink_is_atomic_ln_sfn(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, _, rootfs = make_rootfs
    (root / "lib").mkdir()
    (root / "lib" / "libcuda.so").write_text("a stub the image shipped")
    assert rootfs.symlink("libcuda.so.1", "/lib/libcuda.so")
    assert os.readlink(root / "lib" / "libcuda.so") == "libcuda.so.1"
    assert not rootfs.symlink("libcuda.so.1", "/lib/libcuda.so")
    assert rootfs.symlink("libcuda.so.2", "/lib/libcuda.so")
    assert os.readlink(root / "lib" / "libcuda.so") == "libcuda.so.2"
    (root / "lib" / "dir").mkdir()
    (root / "lib" / "dir" / "keep").write_text("")
    with pytest.raises(OSError):
        rootfs.symlink("x", "/lib/dir")
    assert sorted(os.listdir(root / "lib")) == ["dir", "libcuda.so"]


def test_remove_symlink_removes_only_a_link_and_never_through_one(
    make_rootfs: tuple[Path, Path, Rootfs],
) -> None:
    root, host, rootfs = make_rootfs
    lib = root / "lib"
    lib.mkdir()
    (lib / "libgone.so.1").symlink_to("libnothere.so.1.0")
    (lib / "libfile.so.1").write_text("a file")
    (lib / "libdir.so.1").mkdir()
    (root / "out").symlink_to(host)  # /out/passwd is the image's /host/passwd: missing
    assert rootfs.remove_symlink("/lib/libgone.so.1")
    assert not os.path.lexists(lib / "libgone.so.1")
    assert not rootfs.remove_symlink("/lib/libfile.so.1") and not rootfs.remove_symlink("/lib/libdir.so.1")
    with pytest.raises(FileNotFoundError):
        rootfs.remove_symlink("/lib/libgone.so.1")
    with pytest.raises(FileNotFoundError):
        rootfs.remove_symlink("/out/passwd")
    assert (host / "passwd").read_text() == "host\n"
    assert sorted(os.listdir(lib)) == ["libdir.so.1", "libfile.so.1"]


def test_reads_refuse_fifos_devices_and_large_files_without_blocking(
    make_rootfs: tuple[Path, Path, Rootfs],
) -> None:
    root, _, rootfs = make_rootfs
    os.mkfifo(root / "fifo")
    os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3)) if os.geteuid() == 0 else None
    (root / "big").write_bytes(b"x" * 100)
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(OSError, match="not a regular file"):
            rootfs.read_regular("/fifo", 10)
        done.set()

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    assert done.wait(5), "reading a FIFO blocked"
    if os.geteuid() == 0:
        with pytest.raises(OSError, match="not a regular file"):
            rootfs.read_regular("/null", 10)
    with pytest.raises(OSError, match="larger than 10 bytes"):
        rootfs.read_regular("/big", 10)


def test_a_path_naming_the_root_itself(make_rootfs: tuple[Path, Path, Rootfs]) -> None:
    root, _, rootfs = make_rootfs
    assert where(rootfs.open("/")) == str(root)
    assert where(rootfs.open("etc/..")) == str(root)
    with pytest.raises(OSError):
        rootfs.symlink("x", "/")


def test_walk_matches_openat2_on_a_maze(tmp_path: Path) -> None:
    """The fallback must land where the kernel does, for every path in a small maze of links."""
    root = tmp_path / "maze"
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "lib64").symlink_to("/usr/lib/x86_64-linux-gnu")
    (root / "usr" / "lib" / "up").symlink_to("../../..")
    (root / "usr" / "lib" / "abs").symlink_to("/lib")
    (root / "usr" / "lib" / "x86_64-linux-gnu" / "libc.so.6").write_text("")
    paths = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
        "/usr/lib/up/lib64/../abs/x86_64-linux-gnu",
        "/usr/lib/up/usr/lib/up/lib",
        "lib/../lib64",
    ]

    def outcome(rootfs: Rootfs, path: str) -> str:
        try:
            return where(rootfs.open(path))
        except OSError as exc:
            return errno.errorcode[exc.errno or 0]

    with Rootfs(str(root)) as kernel, Rootfs(str(root), use_openat2=False) as walk:
        results = [outcome(kernel, path) for path in paths]
        assert results == [outcome(walk, path) for path in paths]
    assert results[-1] == "ENOENT"  # ".." after a link is taken from the link's target, as the kernel does
