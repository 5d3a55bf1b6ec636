"""The image's glibc release, read from its libc.so.6 without running it, and what each release's
ldconfig does differently (glibc's elf/ldconfig.c, cache.c and readelflib.c, release by release)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from cdictk.startpath.helpers.ldcachefile import OLD_MAGIC
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import ldrelease
from cdictk.startpath.hooks.ldrelease import Release
from tests import REPO

HOST_LIBC = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
DEBIAN_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
OTHER_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")
CACHES = REPO / "tests" / "data" / "ldcache"


@pytest.mark.parametrize(
    ("minor", "true"),
    [
        (28, {"abi_tag", "legacy_hwcaps", "type_suffix", "hwcap_lines"}),
        (31, {"abi_tag", "legacy_hwcaps", "type_suffix", "hwcap_lines"}),
        (32, {"abi_tag", "legacy_hwcaps", "type_suffix"}),
        (33, {"abi_tag", "legacy_hwcaps", "type_suffix", "extension", "glibc_hwcaps"}),
        (35, {"abi_tag", "legacy_hwcaps", "type_suffix", "extension", "glibc_hwcaps", "new_dso_names"}),
        (36, {"legacy_hwcaps", "type_suffix", "extension", "glibc_hwcaps", "new_dso_names"}),
        (37, {"libc6_only", "extension", "glibc_hwcaps", "new_dso_names"}),
        (39, {"libc6_only", "extension", "glibc_hwcaps", "new_dso_names", "skips_package_temps"}),
        (42, {"libc6_only", "extension", "glibc_hwcaps", "new_dso_names", "skips_package_temps"}),
    ],
)
def test_each_release_does_what_its_source_does(minor: int, true: set[str]) -> None:
    release = Release(minor)
    rules = {"abi_tag", "extension", "glibc_hwcaps", "new_dso_names", "legacy_hwcaps", "type_suffix"}
    rules |= {"libc6_only", "skips_package_temps", "hwcap_lines", "keeps_loader_links"}
    assert {rule for rule in rules if getattr(release, rule)} == true
    assert Release(minor, debian=True).keeps_loader_links


@pytest.mark.parametrize(
    ("minor", "debian", "cache", "layout"),
    [
        (41, False, None, (False, 2)),
        (33, False, "glibc-2.31-debian11-compat.cache", (False, 2)),  # from 2.33 the release decides
        (31, True, "glibc-2.31-debian11.cache", (False, 2)),  # Debian's patches: new format, marked
        (31, True, "glibc-2.31-debian11-compat.cache", (True, 2)),  # ldconfig -c compat, same patches
        (31, True, None, (False, 2)),  # no cache to go by: Debian's patches
        (31, False, None, (True, 0)),  # upstream's 2.31: the old format around the new, unmarked
        (32, False, None, (False, 0)),  # upstream's 2.32: the new format, unmarked
        (32, False, "glibc-2.36-debian12.cache", (False, 2)),
    ],
)
def test_before_2_33_the_images_own_cache_decides_the_format(
    minor: int, debian: bool, cache: str | None, layout: tuple[bool, int]
) -> None:
    old = None if cache is None else (CACHES / cache).read_bytes()
    release = Release(minor, debian=debian, old_cache=old)
    assert (release.compat, release.endian) == layout


def test_a_cache_that_is_neither_format_is_no_guide() -> None:
    assert (Release(31, old_cache=b"garbage").compat, Release(31, old_cache=b"").endian) == (True, 0)
    # An old-format header whose count points past the file: the old format, unmarked.
    assert (Release(31, old_cache=OLD_MAGIC + b"\0\xff\xff\xff\x7f").compat) is True


def _host_minor() -> int:
    version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    if not version.startswith("glibc 2.") or not HOST_LIBC.exists():
        pytest.skip("needs an x86-64 Debian or Ubuntu host with glibc")
    return int(version.split(".")[1])


def release_of(root: Path, dirs: tuple[str, ...] = DEBIAN_DIRS) -> int | None:
    with Rootfs(str(root)) as rootfs:
        return ldrelease.image_release(rootfs, dirs)


def test_the_release_is_the_newest_symbol_version_libc_defines(tmp_path: Path) -> None:
    minor = _host_minor()
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    shutil.copy2(HOST_LIBC.resolve(), lib / "libc.so.6")
    # 2.37 and 2.40 added no symbol: they read as the release before.
    assert release_of(tmp_path) in ({minor, minor - 1} if minor in (37, 40) else {minor})
    # Before 2.34, libc.so.6 is a link to libc-2.N.so: followed, inside the rootfs.
    (lib / "libc.so.6").rename(lib / "libc-2.99.so")
    (lib / "libc.so.6").symlink_to("/usr/lib/x86_64-linux-gnu/libc-2.99.so")
    assert release_of(tmp_path) == release_of(tmp_path, ("/nowhere", *DEBIAN_DIRS))
    assert release_of(tmp_path) is not None


def test_an_image_without_a_native_libc_has_no_release(tmp_path: Path) -> None:
    _host_minor()
    assert release_of(tmp_path) is None
    lib = tmp_path / "lib64"
    lib.mkdir()
    (lib / "libc.so.6").write_text("/* GNU ld script */\n")
    assert release_of(tmp_path, OTHER_DIRS) is None
    (lib / "libc.so.6").unlink()
    os.mkfifo(lib / "libc.so.6")  # never opened for reading: no hang
    assert release_of(tmp_path, OTHER_DIRS) is None
    (lib / "libc.so.6").unlink()
    shutil.copy2(Path("/usr/lib/x86_64-linux-gnu/libz.so.1").resolve(), lib / "libc.so.6")
    assert release_of(tmp_path, OTHER_DIRS) is None  # a library, but it defines no GLIBC_2.N


def test_release_for_takes_the_newest_without_a_glibc(tmp_path: Path) -> None:
    with Rootfs(str(tmp_path)) as rootfs:
        release = ldrelease.release_for(rootfs, DEBIAN_DIRS, debian=False, old_cache=None)
    assert release.minor == ldrelease.NEWEST and not release.abi_tag


def test_a_compat_cache_aligned_as_on_i386_is_read_for_its_marks() -> None:
    # The release rules find the new header where the node's reader does: after 3 old entries, at 4.
    old = OLD_MAGIC + b"\0" + struct.pack("<I", 3) + bytes(36)
    new = b"glibc-ld.so.cache1.1" + bytes(8) + b"\x02" + bytes(19)
    release = Release(31, old_cache=old + new)
    assert (release.compat, release.endian) == (True, 2)
