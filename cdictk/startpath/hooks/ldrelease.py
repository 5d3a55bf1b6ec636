"""Which glibc release the image carries, and what that release's ldconfig does differently.

The hook writes the ld cache the image's own ldconfig would write (:mod:`cdictk.startpath.hooks.ldscan`,
:mod:`cdictk.startpath.hooks.ldsocache`), and ldconfig changed across releases. The release is the newest
``GLIBC_2.N`` symbol version the image's ``libc.so.6`` defines, read through
:mod:`cdictk.startpath.helpers.elfdso` like any library (nothing in the image runs). Each release defines its
own version, except 2.37 and 2.40, which added no symbol: they read as 2.36 and 2.39, which is exact for 2.40
(its ldconfig writes what 2.39's does) and differs for 2.37 only where :class:`Release` says so. An image
without a glibc (busybox, a static program) gets the newest behaviour.

Below 2.33 the cache format itself is a distribution's choice (Debian and Ubuntu patched 2.31 to write
the new format only, with the byte-order mark of 2.33; upstream writes the old format with the new one
inside): there the image's existing ``/etc/ld.so.cache`` decides, as the last thing its ldconfig wrote.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers import elfdso
from cdictk.startpath.helpers.ldcachefile import OLD_HEADER, OLD_MAGIC, new_header_at
from cdictk.startpath.helpers.rootfs import Rootfs, reopen_regular

NEWEST = 42  # the newest release this module knows; an image without a glibc is treated as it
ENDIAN_LITTLE = 2
# A 64-bit libc of a machine the hook runs on; a 32-bit or x32 one in the same image is not the one
# whose ldconfig runs.
_NATIVE_LIBC_FLAGS = tuple(
    arch | elfdso.FLAG_ELF_LIBC6
    for arch in (
        elfdso.FLAG_X8664_LIB64,
        elfdso.FLAG_AARCH64_LIB64,
        elfdso.FLAG_POWERPC_LIB64,
        elfdso.FLAG_RISCV_FLOAT_ABI_DOUBLE,
        elfdso.FLAG_RISCV_FLOAT_ABI_SOFT,
    )
)


class Release:
    """What the image's ldconfig (glibc 2.``minor``) does where releases differ, one attribute each."""

    __slots__ = (
        "abi_tag",
        "compat",
        "endian",
        "extension",
        "glibc_hwcaps",
        "hwcap_lines",
        "keeps_loader_links",
        "legacy_hwcaps",
        "libc6_only",
        "minor",
        "new_dso_names",
        "skips_package_temps",
        "type_suffix",
    )

    def __init__(self, minor: int, *, debian: bool = False, old_cache: bytes | None = None) -> None:
        self.minor = minor
        # <= 2.35: each entry's osversion is the library's NT_GNU_ABI_TAG (the loader skips a library
        # tagged for a newer kernel than the running one); 2.36 removed the kernel version check.
        self.abi_tag = minor <= 35
        # >= 2.33: the extension directory (the generator string), a tail-merged string table and the
        # glibc-hwcaps subdirectories (which the writer leaves to ldconfig).
        self.extension = minor >= 33
        self.glibc_hwcaps = minor >= 33
        # >= 2.34: ld.so.* and ld64.so.* count as libraries too (_dl_is_dso).
        self.new_dso_names = minor >= 34
        # <= 2.36: legacy hwcap subdirectories (tls, x86_64, haswell, ...) are scanned and "dir=type"
        # lines parsed, both left to ldconfig; from 2.37 the former are plain directories, and "=" is
        # part of the directory's name.
        self.legacy_hwcaps = minor <= 36
        self.type_suffix = minor <= 36
        # >= 2.37: every library is libc6's (a 32-bit one without libc in DT_NEEDED no longer plain ELF).
        self.libc6_only = minor >= 37
        # >= 2.39: RPM's (";" in the name) and dpkg's (.dpkg-new, .dpkg-tmp) temporary files are skipped.
        self.skips_package_temps = minor >= 39
        # <= 2.31: "hwcap N NAME" lines define hwcap subdirectory names (left to ldconfig); later ignored.
        self.hwcap_lines = minor <= 31
        # Debian and Ubuntu's ldconfig never repoints an existing link to the dynamic loader.
        self.keeps_loader_links = debian
        self.compat, self.endian = _layout(minor, debian, old_cache)


def _layout(minor: int, debian: bool, old_cache: bytes | None) -> tuple[bool, int]:
    """(the old format with the new one inside, the new header's flags byte) of the cache to write."""
    if minor >= 33:
        return False, ENDIAN_LITTLE
    if old_cache is not None:
        start = new_header_at(old_cache)
        if start is not None and len(old_cache) > start + 28:
            return start > 0, old_cache[start + 28]
        if old_cache.startswith(OLD_MAGIC) and len(old_cache) >= OLD_HEADER:
            return True, 0
    # No cache to go by: what the release writes unpatched, Debian's patches for a Debian image.
    if debian:
        return False, ENDIAN_LITTLE
    return minor <= 31, 0


def image_release(rootfs: Rootfs, libdirs: tuple[str, ...]) -> int | None:
    """N of the image's glibc 2.N: from the first native ``libc.so.6`` in ``libdirs``; None without one."""
    for libdir in libdirs:
        try:
            probe = rootfs.open(f"{libdir}/libc.so.6")
        except OSError:
            continue
        try:
            fd = reopen_regular(probe, "libc.so.6")
        except OSError:
            continue
        finally:
            os.close(probe)
        try:
            size = os.fstat(fd).st_size
            dso = elfdso.read_dso(fd, size)
            if dso is not None and dso.flags in _NATIVE_LIBC_FLAGS:
                return elfdso.glibc_minor(fd, size)
        except (OSError, ValueError):
            continue
        finally:
            os.close(fd)
    return None


def release_for(
    rootfs: Rootfs, libdirs: tuple[str, ...], *, debian: bool, old_cache: bytes | None
) -> Release:
    """The :class:`Release` of the image at ``rootfs`` (the newest when it has no glibc)."""
    minor = image_release(rootfs, libdirs)
    return Release(NEWEST if minor is None else minor, debian=debian, old_cache=old_cache)
