"""The cache writer against glibc's own ldconfig: for the same image, the same bytes and the same links.

Each image is built twice; the host's ldconfig indexes one copy (``ldconfig -r``, as root it chroots,
so it sees the copy as its ``/``), cdictk's scan and writer the other. The images hold real libraries
copied from the host, gcc-built stubs, and what trips an indexer up: missing SONAME links, development
links, stale links, a link that is not the SONAME, two versions of one SONAME, a library without a
SONAME, a linker script, a FIFO, a directory named like a library, includes, duplicate and merged
(/lib -> usr/lib) directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cdictk.hooks import ldscan
from cdictk.hooks.ldsocache import build_cache, read_generator
from cdictk.rootfs import Rootfs
from tests.unit.hooks.sandbox_programs import HOST_LDCONFIG, Programs, programs

TRIPLET_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
HOST_LIBS = ("libc.so.6", "libm.so.6", "libz.so.1", "libpthread.so.0", "libgcc_s.so.1")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    if not os.path.isdir("/usr/lib/x86_64-linux-gnu"):
        pytest.skip("the byte-for-byte comparison uses an x86-64 Debian host's ldconfig and libraries")
    return programs(tmp_path_factory)


def _copy_host_lib(soname: str, folder: Path) -> None:
    source = Path("/usr/lib/x86_64-linux-gnu", soname)
    if source.exists():
        real = source.resolve()
        shutil.copy2(real, folder / real.name)


def plain(root: Path, built: Programs) -> None:
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")  # merged /usr: the same directory under two names
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(
        "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n"
    )
    for soname in HOST_LIBS:
        _copy_host_lib(soname, lib)
    shutil.copy2(built.libs["libfoo.so.1.2.3"], lib)


def tricky(root: Path, built: Programs) -> None:
    plain(root, built)
    driver = root / "usr/local/nvidia/lib64"
    driver.mkdir(parents=True)
    shutil.copy2(built.libs["libdrv.so.550.54"], driver)
    shutil.copy2(built.libs["libdrv.so.550.54"], driver / "libdrv.so.550.120")  # the newer version wins
    (driver / "libdrv.so").symlink_to("libdrv.so.1")  # dev link, dangling until the SONAME link exists
    (driver / "libgone.so.1").symlink_to("libnothere.so.1.0")  # stale
    (driver / "libother.so.3").symlink_to("libdrv.so.550.54")  # a link that is not the SONAME
    (driver / "libscript.so").write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    os.mkfifo(driver / "libfifo.so.1")
    (driver / "libdir.so.1").mkdir()
    (driver / "libempty.so.1").write_bytes(b"")
    shutil.copy2(built.libs["libevil.so.1.0"], driver / "libnosoname.so")
    (driver / "README").write_text("not a library\n")
    (root / "etc/ld.so.conf.d/zz-driver.conf").write_text(
        "/usr/local/nvidia/lib64/\n  /usr/local/nvidia/lib64  # again\nhwcap 0 nosegneg\n/missing\n\n"
        "/usr/lib/x86_64-linux-gnu\ninclude extra/*.conf\n"
    )
    (root / "etc/ld.so.conf.d/extra").mkdir()
    (root / "etc/ld.so.conf.d/extra/one.conf").write_text("/opt/one\n")
    (root / "etc/ld.so.conf.d/extra/.hidden.conf").write_text("/opt/hidden\n")
    for folder in ("opt/one", "opt/hidden"):
        (root / folder).mkdir(parents=True)
        shutil.copy2(built.libs["libfoo.so.1.2.3"], root / folder)  # libfoo.so.1 in two directories


def _links(root: Path) -> dict[str, str]:
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            path = Path(folder, name)
            if path.is_symlink():
                found[str(path.relative_to(root))] = os.readlink(path)
    return found


def _compare(tmp_path: Path, build: Callable[[Path, Programs], None], built: Programs) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        root.mkdir()
        build(root, built)
    before = _links(theirs)
    indexed = subprocess.run([HOST_LDCONFIG, "-r", str(theirs)], capture_output=True, check=False)
    assert indexed.returncode == 0, indexed.stderr
    generator = read_generator((theirs / "etc/ld.so.cache").read_bytes())
    assert generator is not None
    with Rootfs(str(ours)) as rootfs:
        found = ldscan.scan(rootfs, TRIPLET_DIRS)
        rootfs.symlinks(found.links)
    assert build_cache(found.entries, generator) == (theirs / "etc/ld.so.cache").read_bytes()
    made = {path: target for path, target in _links(theirs).items() if before.get(path) != target}
    gone = {path for path in before if path not in _links(theirs)}  # ldconfig deletes stale links
    ours_made = {path: target for path, target in _links(ours).items() if before.get(path) != target}
    assert ours_made == made
    assert gone <= {"usr/local/nvidia/lib64/libgone.so.1"}


def test_a_plain_image_is_indexed_as_ldconfig_indexes_it(built: Programs, tmp_path: Path) -> None:
    _compare(tmp_path, plain, built)


def test_a_tricky_image_is_indexed_as_ldconfig_indexes_it(built: Programs, tmp_path: Path) -> None:
    _compare(tmp_path, tricky, built)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda root: (root / "usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3").mkdir(parents=True),
            "glibc-hwcaps",
        ),
        (lambda root: (root / "usr/lib/x86_64-linux-gnu/tls").mkdir(), "hwcap subdirectory"),
        (lambda root: (root / "etc/ld.so.conf.d/t.conf").write_text("/opt/x=libc6\n"), "library type"),
        (
            lambda root: (root / "etc/ld.so.conf.d/t.conf").write_text("include /etc/*/x.conf\n"),
            "include pattern",
        ),
    ],
)
def test_what_only_ldconfig_does_is_handed_back(
    built: Programs, tmp_path: Path, change: Callable[[Path], object], reason: str
) -> None:
    plain(tmp_path, built)
    change(tmp_path)
    with Rootfs(str(tmp_path)) as rootfs, pytest.raises(ldscan.Unsupported, match=reason):
        ldscan.scan(rootfs, TRIPLET_DIRS)


def test_a_link_out_of_the_image_is_followed_inside_it(built: Programs, tmp_path: Path) -> None:
    """/usr/lib/x86_64-linux-gnu/libfoo.so.1 -> /etc/passwd names the image's /etc/passwd, never the
    host's: it is not a library, so it is no entry."""
    plain(tmp_path, built)
    (tmp_path / "usr/lib/x86_64-linux-gnu/libhost.so.1").symlink_to("/usr/lib/x86_64-linux-gnu/libc.so.6")
    (tmp_path / "usr/lib/x86_64-linux-gnu/libc.so.6").unlink()
    with Rootfs(str(tmp_path)) as rootfs:
        found = ldscan.scan(rootfs, TRIPLET_DIRS)
    assert b"libhost.so.1" not in {entry.soname for entry in found.entries}
