"""The cache writer against glibc's own ldconfig: for the same image, the same bytes and the same links.

Each image is built twice; the host's (static) ldconfig is copied into one copy and run there in a
chroot, as an image's own ldconfig runs in its container, and cdictk's walk, scan and writer index the
other. The images hold real libraries copied from the host, gcc-built stubs, and what trips an indexer
up: missing SONAME links, development links, dangling links (which ldconfig removes when their name
holds ``.so.``), a link to a SONAME link an earlier directory's scan makes, a loader link Debian's
ldconfig never repoints, a link that is not the SONAME, two versions of one SONAME, a library without a
SONAME, a linker script, a FIFO, a directory named like a library, includes, duplicate and merged
(/lib -> usr/lib) directories. What only other releases do (the ABI note of 2.35 and older, the rules
of 2.37 and later) is checked against glibc's source here, and against those releases' own ldconfig in
tests/e2e/test_ldcache_releases.py.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cdictk.startpath.helpers.elfdso import FLAG_ELF, FLAG_ELF_LIBC6
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import ldconf, ldscan
from cdictk.startpath.hooks.ldrelease import Release
from cdictk.startpath.hooks.ldsocache import CacheEntry, build_cache, read_generator
from tests.rootmarker import root_only
from tests.unit.startpath.hooks.sandbox_programs import HOST_LDCONFIG, Programs, programs, run_isolated

pytestmark = pytest.mark.root

LIB = "/usr/lib/x86_64-linux-gnu"
# Debian's ldconfig: the loader's search path after the configuration's directories.
BUILTIN = ("/lib/x86_64-linux-gnu", LIB, "/lib", "/usr/lib")
HOST_LIBS = ("libc.so.6", "libm.so.6", "libz.so.1", "libpthread.so.0", "libgcc_s.so.1")
HOST = Release(36, debian=True)  # what this test's oracle, Debian 12's ldconfig, is


@pytest.fixture(scope="module")
@root_only
def built(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    if not os.path.isdir(LIB) or not os.path.exists("/etc/debian_version"):
        pytest.skip("the byte-for-byte comparison uses an x86-64 Debian host's ldconfig and libraries")
    return programs(tmp_path_factory)


def _copy_host_lib(soname: str, folder: Path) -> None:
    source = Path(LIB, soname)
    if source.exists():
        real = source.resolve()
        shutil.copy2(real, folder / real.name)


def plain(root: Path, built: Programs) -> None:
    lib = root / LIB.lstrip("/")
    lib.mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")  # merged /usr: the same directory under two names
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(
        f"# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n{LIB}\n"
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
    (driver / "libgone.so.1").symlink_to("libnothere.so.1.0")  # stale: removed
    (driver / "libalias.so.7").symlink_to(
        "libdrv.so.1"
    )  # dangling when read: removed, though made valid later
    (driver / "libgone.so").symlink_to("libnothere.so")  # stale, but no ".so.": kept
    (driver / "README.so.1").symlink_to("nothing")  # not a library's name: never looked at
    (driver / "libother.so.3").symlink_to("libdrv.so.550.54")  # a link that is not the SONAME
    (driver / "libscript.so").write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    os.mkfifo(driver / "libfifo.so.1")
    (driver / "libdir.so.1").mkdir()
    (driver / "libempty.so.1").write_bytes(b"")
    shutil.copy2(built.libs["libevil.so.1.0"], driver / "libnosoname.so")
    (driver / "README").write_text("not a library\n")
    (root / "etc/ld.so.conf.d/zz-driver.conf").write_text(
        "/usr/local/nvidia/lib64/\n  /usr/local/nvidia/lib64  # again\nhwcap 0 nosegneg\n/missing\n\n"
        f"{LIB}\ninclude extra/*.conf\n"
    )
    (root / "etc/ld.so.conf.d/extra").mkdir()
    (root / "etc/ld.so.conf.d/extra/one.conf").write_text("/opt/one\n")
    (root / "etc/ld.so.conf.d/extra/.hidden.conf").write_text("/opt/hidden\n")
    for folder in ("opt/one", "opt/hidden"):
        (root / folder).mkdir(parents=True)
        shutil.copy2(built.libs["libfoo.so.1.2.3"], root / folder)  # libfoo.so.1 in two directories
    # Read after the driver's directory made its SONAME link: a library of its own there.
    (root / "opt/one/libdrv-alias.so.1").symlink_to("/usr/local/nvidia/lib64/libdrv.so.1")


def loaders(root: Path, built: Programs) -> None:
    """Two copies of the loader, its SONAME link on the older: upstream's ldconfig would repoint it to
    the newer name, Debian's leaves a loader link that resolves alone."""
    plain(root, built)
    lib = root / LIB.lstrip("/")
    loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
    shutil.copy2(loader, lib / "ld-2.30.so")
    shutil.copy2(loader, lib / "ld-2.31.so")
    (lib / "ld-linux-x86-64.so.2").symlink_to("ld-2.30.so")


def _links(root: Path) -> dict[str, str]:
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            path = Path(folder, name)
            if path.is_symlink():
                found[str(path.relative_to(root))] = os.readlink(path)
    return found


def scan(root: Path, release: Release = HOST) -> list[CacheEntry]:
    with Rootfs(str(root)) as rootfs:
        conf = ldconf.read(rootfs, "/etc/ld.so.conf", hwcap_lines=release.hwcap_lines)
        assert conf.unsupported is None
        return ldscan.scan(rootfs, conf.dirs, BUILTIN, release)


def _compare(tmp_path: Path, build: Callable[[Path, Programs], None], built: Programs) -> dict[str, str]:
    """Index both copies; the links ldconfig removed (path -> former target)."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for root in (ours, theirs):
        root.mkdir()
        build(root, built)
    before = _links(theirs)
    (theirs / "sbin").mkdir()
    shutil.copy2(HOST_LDCONFIG, theirs / "sbin/ldconfig")
    indexed = subprocess.run(["chroot", str(theirs), "/sbin/ldconfig"], capture_output=True, check=False)
    assert indexed.returncode == 0, indexed.stderr
    generator = read_generator((theirs / "etc/ld.so.cache").read_bytes())
    assert generator is not None
    assert build_cache(scan(ours), generator) == (theirs / "etc/ld.so.cache").read_bytes()
    theirs_after, ours_after = _links(theirs), _links(ours)
    assert ours_after == theirs_after
    return {path: target for path, target in before.items() if path not in theirs_after}


def test_a_plain_image_is_indexed_as_ldconfig_indexes_it(built: Programs, tmp_path: Path) -> None:
    assert _compare(tmp_path, plain, built) == {}


def test_a_tricky_image_is_indexed_as_ldconfig_indexes_it(built: Programs, tmp_path: Path) -> None:
    removed = _compare(tmp_path, tricky, built)
    assert removed == {
        "usr/local/nvidia/lib64/libgone.so.1": "libnothere.so.1.0",
        "usr/local/nvidia/lib64/libalias.so.7": "libdrv.so.1",
    }
    # The newest name of the SONAME wins, a link that is not the SONAME weighed as a file among them.
    assert os.readlink(tmp_path / "ours/usr/local/nvidia/lib64/libdrv.so.1") == "libother.so.3"


def test_debians_ldconfig_leaves_the_loaders_link_alone(built: Programs, tmp_path: Path) -> None:
    _compare(tmp_path, loaders, built)
    assert os.readlink(tmp_path / "ours" / LIB.lstrip("/") / "ld-linux-x86-64.so.2") == "ld-2.30.so"
    # Upstream's (any other distribution's) repoints it to the newer copy.
    other = tmp_path / "other"
    other.mkdir()
    loaders(other, built)
    scan(other, Release(36))
    assert os.readlink(other / LIB.lstrip("/") / "ld-linux-x86-64.so.2") == "ld-2.31.so"


def test_a_dangling_link_on_another_mount_is_left_alone(built: Programs, tmp_path: Path) -> None:
    """Links are never changed across a mount point (a volume in the container): ldconfig would."""
    root = tmp_path / "root"
    root.mkdir()
    plain(root, built)
    volume = root / "opt/volume"
    volume.mkdir(parents=True)
    (root / "etc/ld.so.conf.d/v.conf").write_text("/opt/volume\n")
    code = (
        "import os, subprocess, sys\n"
        "from cdictk.startpath.hooks import ldconf, ldscan\n"
        "from cdictk.startpath.hooks.ldrelease import Release\n"
        "from cdictk.startpath.helpers.rootfs import Rootfs\n"
        "root, volume = sys.argv[1], sys.argv[2]\n"
        "subprocess.run(['mount', '-t', 'tmpfs', 'tmpfs', volume], check=True)\n"
        "os.symlink('libnothere.so.1.0', volume + '/libgone.so.1')\n"
        "with Rootfs(root) as rootfs:\n"
        "    ldscan.scan(rootfs, ldconf.read(rootfs, '/etc/ld.so.conf').dirs, (), Release(36))\n"
        "print(os.readlink(volume + '/libgone.so.1'))\n"
    )
    assert run_isolated(code, str(root), str(volume)).stdout.strip() == "libnothere.so.1.0"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda root: (root / LIB.lstrip("/") / "glibc-hwcaps/x86-64-v3").mkdir(parents=True),
            "glibc-hwcaps",
        ),
        (lambda root: (root / LIB.lstrip("/") / "tls").mkdir(), "hwcap subdirectory"),
        (lambda root: (root / "etc/ld.so.conf.d/t.conf").write_text("/opt/x=libc6\n"), "library type"),
    ],
)
def test_what_only_ldconfig_does_is_handed_back(
    built: Programs, tmp_path: Path, change: Callable[[Path], object], reason: str
) -> None:
    plain(tmp_path, built)
    change(tmp_path)
    with pytest.raises(ldscan.Unsupported, match=reason):
        scan(tmp_path)


def test_an_image_handed_back_is_handed_back_untouched(built: Programs, tmp_path: Path) -> None:
    """The last directory needs ldconfig: the first one's links are neither made nor removed."""
    plain(tmp_path, built)
    lib = tmp_path / LIB.lstrip("/")
    (lib / "libgone.so.1").symlink_to("libnothere.so.1.0")
    (tmp_path / "usr/lib/tls").mkdir()  # /usr/lib: a built-in directory, scanned last
    before = _links(tmp_path)
    with pytest.raises(ldscan.Unsupported, match="hwcap subdirectory"):
        scan(tmp_path)
    assert _links(tmp_path) == before
    assert not (lib / "libfoo.so.1").exists()


def test_what_later_releases_no_longer_hand_back(built: Programs, tmp_path: Path) -> None:
    """2.37 and later: a hwcap-named subdirectory is a plain directory (not scanned), and "=" is part of
    a directory's name; 2.32 and earlier have no glibc-hwcaps."""
    plain(tmp_path, built)
    lib = tmp_path / LIB.lstrip("/")
    (lib / "tls").mkdir()
    shutil.copy2(built.libs["libdrv.so.550.54"], lib / "tls")
    (tmp_path / "opt/x=libc6").mkdir(parents=True)
    shutil.copy2(built.libs["libdrv.so.550.54"], tmp_path / "opt/x=libc6")
    (tmp_path / "etc/ld.so.conf.d/t.conf").write_text("/opt/x=libc6\n")
    entries = scan(tmp_path, Release(41, debian=True))
    assert {e.path for e in entries if e.soname == b"libdrv.so.1"} == {b"/opt/x=libc6/libdrv.so.1"}
    (lib / "tls").rename(lib / "glibc-hwcaps")
    (tmp_path / "etc/ld.so.conf.d/t.conf").unlink()
    assert b"libdrv.so.1" not in {e.soname for e in scan(tmp_path, Release(31, debian=True))}


def test_package_managers_temporary_files_are_skipped_from_2_39(built: Programs, tmp_path: Path) -> None:
    for minor, expected in ((38, {b"libdrv.so.1", b"libevil.so.1"}), (39, set())):
        root = tmp_path / str(minor)
        plain(root, built)
        lib = root / LIB.lstrip("/")
        shutil.copy2(built.libs["libdrv.so.550.54"], lib / "libdrv.so.550.54.dpkg-new")
        shutil.copy2(built.libs["libevil.so.1.0"], lib / "libevil.so.1.0;5f3a2b1c")
        sonames = {e.soname for e in scan(root, Release(minor, debian=True))}
        assert sonames & {b"libdrv.so.1", b"libevil.so.1"} == expected, minor


def test_the_abi_note_is_the_entrys_osversion_up_to_2_35(built: Programs, tmp_path: Path) -> None:
    plain(tmp_path, built)
    tagged = {e.soname: e.osversion for e in scan(tmp_path, Release(35, debian=True))}
    readelf = subprocess.run(
        ["readelf", "-n", str(Path(LIB, "libc.so.6").resolve())], capture_output=True, text=True, check=True
    )
    major, minor, patch = readelf.stdout.split("OS: Linux, ABI: ")[1].split()[0].split(".")
    assert tagged[b"libc.so.6"] == int(major) << 16 | int(minor) << 8 | int(patch) != 0
    assert tagged[b"libfoo.so.1"] == 0  # a gcc-built library carries no ABI note
    assert {e.osversion for e in scan(tmp_path, Release(36, debian=True))} == {0}


def test_a_plain_elf_library_is_libc6_from_2_37(built: Programs, tmp_path: Path) -> None:
    """A 32-bit library that neither needs libc nor names glibc's loader: "ELF" to 2.36, libc6 after."""
    plain(tmp_path, built)
    lib32 = tmp_path / "usr/lib32"
    lib32.mkdir()
    source = tmp_path / "plain.c"
    source.write_text("int plain(void) { return 0; }\n")
    made = subprocess.run(
        [
            "gcc",
            "-m32",
            "-shared",
            "-nostdlib",
            "-Wl,-soname,libplain.so.1",
            "-o",
            lib32 / "libplain.so.1",
            source,
        ],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"gcc cannot build a 32-bit library here: {made.stderr.decode(errors='replace')[:200]}")
    (tmp_path / "etc/ld.so.conf.d/lib32.conf").write_text("/usr/lib32\n")
    for minor, flags in ((36, FLAG_ELF), (37, FLAG_ELF_LIBC6)):
        found = {e.soname: e.flags for e in scan(tmp_path, Release(minor, debian=True))}
        assert found[b"libplain.so.1"] == flags


def test_a_link_out_of_the_image_is_followed_inside_it(built: Programs, tmp_path: Path) -> None:
    """/usr/lib/x86_64-linux-gnu/libhost.so.1 -> <the host's libc> names the image's path, never the
    host's: missing there, so it is a dangling link, removed as ldconfig removes it."""
    plain(tmp_path, built)
    host_libc = Path(LIB, "libc.so.6").resolve()
    (tmp_path / LIB.lstrip("/") / "libhost.so.1").symlink_to(host_libc)
    (tmp_path / LIB.lstrip("/") / host_libc.name).unlink()
    entries = scan(tmp_path)
    assert b"libhost.so.1" not in {entry.soname for entry in entries}
    assert not os.path.lexists(tmp_path / LIB.lstrip("/") / "libhost.so.1")


def test_a_link_loop_is_no_library_and_is_kept(built: Programs, tmp_path: Path) -> None:
    """ldconfig removes a loop (its stat fails with ELOOP); openat2 says ELOOP for a procfs magic link
    too, which the container's ldconfig follows, so the writer keeps both (a declared difference)."""
    plain(tmp_path, built)
    lib = tmp_path / LIB.lstrip("/")
    (lib / "libloop.so.1").symlink_to("libloop.so.1")
    assert b"libloop.so.1" not in {entry.soname for entry in scan(tmp_path)}
    assert stat.S_ISLNK(os.lstat(lib / "libloop.so.1").st_mode)
