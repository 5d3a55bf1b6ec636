"""What the image's own glibc ldconfig would put in its ld.so.cache, and the links it would change, done
without running it.

The directories are ld.so.conf's (read by :mod:`cdictk.startpath.hooks.ldconf`), in ldconfig's order, then the
built-in system directories of the ldconfig this stands in for; a directory reached twice (a merged
``/usr`` link) counts once, under its first name. Directory by directory, as ldconfig goes: a dangling
symlink whose name contains ``.so.`` is removed, the shared objects are chosen as ldconfig chooses them
(a file before a link to it, the newer version of one SONAME, a ``libfoo.so`` development link as a name
of its own), and the missing SONAME links are made, so that a later directory sees them as ldconfig's
next directory would. Where releases differ, the image's :class:`~cdictk.startpath.hooks.ldrelease.Release`
says what its ldconfig does. Everything is resolved inside the rootfs and read through
:mod:`cdictk.startpath.helpers.elfdso`; nothing in the image runs.

What ldconfig does that this does not attempt raises :class:`Unsupported` so that the caller can run
ldconfig instead: glibc-hwcaps subdirectories (2.33 and later), legacy hwcap subdirectories and
``dir=type`` lines (2.36 and earlier). Links are never changed across a mount point (a volume mounted
into the container): ldconfig would change them there.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.elfdso import FLAG_ELF, FLAG_ELF_LIBC6, read_dso
from cdictk.startpath.helpers.rootfs import Rootfs, reopen_regular
from cdictk.startpath.hooks.ldrelease import Release
from cdictk.startpath.hooks.ldsocache import CacheEntry, libkey

_MAX_DIRS = 256
_MAX_ENTRIES = 1 << 16  # directory entries looked at, over all directories
_FLAG_ELF_LIBC5 = 0x0002
# Names ldconfig 2.36 and older treat as hwcap or platform subdirectories (x86 and the legacy "tls");
# a superset is harmless: meeting one only hands the work back to ldconfig.
_HWCAP_NAMES = frozenset(
    {"tls", "x86_64", "avx512_1", "haswell", "xeon_phi", "i386", "i486", "i586", "i686", "aarch64"}
)
# The loaders whose existing link Debian's and Ubuntu's ldconfig never repoints, as their patch's list
# compiles: two missing commas there join three names into one, so x32's loader is not among them.
_LOADER_SONAMES = frozenset(
    {
        b"ld-kfreebsd-x86-64.so.1",
        b"ld-linux-aarch64.so.1",
        b"ld-linux-aarch64_be.so.1",
        b"ld-linux-armhf.so.3",
        b"ld-linux-ia64.so.2",
        b"ld-linux-mipsn8.so.1",
        b"ld-linux-riscv64-lp64.so.1ld-linux-riscv64-lp64d.so.1ld-linux-x32.so.2",
        b"ld-linux-x86-64.so.2",
        b"ld-linux.so.2",
        b"ld-linux.so.3",
        b"ld.so.1",
        b"ld64.so.1",
        b"ld64.so.2",
    }
)


class Unsupported(Exception):
    """The image asks for something only ldconfig itself does; the message says what."""


# Plain classes: dataclasses costs the hook milliseconds of imports on every container start.


class _Dir:
    __slots__ = ("key", "path")

    def __init__(self, path: str, key: tuple[int, int]) -> None:
        self.path = path  # as configured, trailing blanks and slashes stripped
        self.key = key


class _Library:
    __slots__ = ("flags", "is_link", "name", "osversion")

    def __init__(self, name: bytes, is_link: bool, dso: _Read) -> None:
        self.name = name
        self.is_link = is_link
        self.flags, _, self.osversion = dso


# (flags, SONAME, osversion) of a shared object, as ldconfig reads it.
_Read = tuple[int, bytes | None, int]


def scan(rootfs: Rootfs, dirs: list[str], system_dirs: tuple[str, ...], release: Release) -> list[CacheEntry]:
    """The cache entries for the image at ``rootfs``, in the order ldconfig adds them, as the ldconfig
    of ``release`` whose built-in directories are ``system_dirs`` finds them in ``dirs`` (ld.so.conf's
    directory lines); the SONAME links are made and the stale ones removed on the way."""
    found: list[_Dir] = []
    for line in dirs:
        _add_dir(rootfs, line, found, release)
    for system_dir in system_dirs:
        _add_dir(rootfs, system_dir, found, release)
    # Every directory is listed before anything changes, so that an image handed back to ldconfig
    # (Unsupported) is handed back untouched. Listing ahead reads what ldconfig's readdir would: no
    # directory is scanned twice, and the links are made only in the directory being indexed.
    listed: list[_Listing] = []
    try:
        budget = [_MAX_ENTRIES]
        for directory in found:
            listing = _list_dir(rootfs, directory.path, budget, release)
            if listing is not None:
                listed.append(listing)
        entries: list[CacheEntry] = []
        for listing in listed:
            _index_dir(rootfs, listing, entries, release)
        return entries
    finally:
        for listing in listed:
            os.close(listing.fd)


def _add_dir(rootfs: Rootfs, line: str, dirs: list[_Dir], release: Release) -> None:
    """ldconfig's ``add_dir``: trailing blanks and slashes stripped, a missing path skipped, a
    directory already listed (the same inode) kept under its first name."""
    if release.type_suffix and "=" in line:
        raise Unsupported(f"a directory with a library type ({line})")
    path = line.rstrip(" \t\n\v\f\r").rstrip("/")
    if not path:
        return
    try:
        fd = rootfs.open(path)
    except (OSError, ValueError):
        return
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    key = (info.st_dev, info.st_ino)
    if any(known.key == key for known in dirs):
        return
    if len(dirs) >= _MAX_DIRS:
        raise Unsupported(f"more than {_MAX_DIRS} library directories")
    if release.legacy_hwcaps and any(part in _HWCAP_NAMES for part in path.split("/")[1:]):
        raise Unsupported(f"{path}: a hwcap directory")
    if release.glibc_hwcaps and stat.S_ISDIR(info.st_mode) and _exists(rootfs, f"{path}/glibc-hwcaps"):
        raise Unsupported(f"{path}/glibc-hwcaps")
    dirs.append(_Dir(path, key))


def _exists(rootfs: Rootfs, path: str) -> bool:
    try:
        os.close(rootfs.open(path))
    except OSError:
        return False
    return True


def is_dso(name: bytes, new_names: bool = True) -> bool:
    """glibc's ``_dl_is_dso``: lib*.so*, ld-*.so*, and from 2.34 (``new_names``) ld.so.*, ld64.so.*."""
    if name.startswith((b"lib", b"ld-")) and b".so" in name:
        return True
    return new_names and name.startswith((b"ld.so.", b"ld64.so."))


class _Listing:
    __slots__ = ("fd", "files", "links", "path")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd  # the directory, open for reading
        self.files: list[str] = []  # regular files with a library's name
        self.links: list[str] = []  # symlinks with a library's name


def _list_dir(rootfs: Rootfs, path: str, budget: list[int], release: Release) -> _Listing | None:
    """The directory's entries that ldconfig reads as libraries; None when it cannot be opened."""
    try:
        dir_fd = rootfs.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    listing = _Listing(path, dir_fd)
    try:
        with os.scandir(dir_fd) as entries:
            found = list(entries)
        budget[0] -= len(found)
        if budget[0] < 0:
            raise Unsupported(f"more than {_MAX_ENTRIES} directory entries")
        for entry in found:
            kind = _kind(rootfs, path, entry, release)
            if kind == "file":
                listing.files.append(entry.name)
            elif kind == "link":
                listing.links.append(entry.name)
    except BaseException:
        os.close(dir_fd)
        raise
    return listing


def _index_dir(rootfs: Rootfs, listing: _Listing, entries: list[CacheEntry], release: Release) -> None:
    """ldconfig's ``search_dir`` on a listed directory: its dangling ``.so.`` links removed, its
    libraries chosen and added to ``entries``, their SONAME links made."""
    path, dir_fd = listing.path, listing.fd
    # Files first, so that a link to a file of the same directory (libfoo.so.1 -> libfoo.so.1.2.3,
    # most links) reuses what was read from it instead of resolving and reading it again.
    files: dict[str, _Read | None] = {}
    libraries: dict[bytes, _Library] = {}
    links: dict[str, str] = {}
    for name in listing.files:
        files[name] = _read_file(dir_fd, name, release)
        _choose(libraries, os.fsencode(name), False, files[name])
    for name in listing.links:
        try:
            links[name] = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            continue
    stale = []
    for name, target in links.items():
        if "/" not in target and target in files:
            dso = files[target]
        else:
            try:
                dso = _read_link(rootfs, f"{path}/{name}", release)
            except (FileNotFoundError, NotADirectoryError):
                if ".so." in name:
                    stale.append(name)
                continue
        _choose(libraries, os.fsencode(name), True, dso)
    for name in stale:
        # ldconfig removes a dangling link as it reads the directory, before making any link.
        try:
            if rootfs.remove_symlink(f"{path}/{name}"):
                del links[name]
        except OSError:
            pass
    made = []
    for soname, library in libraries.items():
        if not library.is_link and soname != library.name:
            wanted = _link(rootfs, (dir_fd, path), (library.name, soname), links, release)
            if wanted is not None:
                made.append(wanted)
        entries.append(
            CacheEntry(soname, os.fsencode(path) + b"/" + soname, library.flags, 0, library.osversion)
        )
    for target, link in made:
        # As ldconfig, which says "Can't link" and goes on: a SONAME link that cannot be made (its
        # directory a read-only volume, a mount the hook never writes across) costs that library
        # its link, not the container its start. The cache still names the link's path.
        try:
            rootfs.symlink(target, link)
        except OSError:
            continue


def _kind(rootfs: Rootfs, path: str, entry: os.DirEntry[str], release: Release) -> str | None:
    """ "file" or "link" for an entry ldconfig reads as a library; None for one it passes over."""
    name = os.fsencode(entry.name)
    is_link = entry.is_symlink()
    is_regular = not is_link and entry.is_file(follow_symlinks=False)
    is_dir = not is_link and entry.is_dir(follow_symlinks=False)
    if not (is_link or is_regular or is_dir):
        return None
    if (
        release.legacy_hwcaps
        and entry.name in _HWCAP_NAMES
        and not is_regular
        and _is_dir(rootfs, f"{path}/{entry.name}")
    ):
        raise Unsupported(f"{path}/{entry.name}: a hwcap subdirectory")
    if not is_dso(name, release.new_dso_names) or is_dir:
        return None
    if name.endswith(b".#prelink#") or (len(name) >= 17 and name[-17:-6] == b".#prelink#."):
        return None  # prelink's temporary files
    if release.skips_package_temps and (b";" in name or name.endswith((b".dpkg-new", b".dpkg-tmp"))):
        return None  # RPM's and dpkg's
    return "link" if is_link else "file"


def _choose(libraries: dict[bytes, _Library], name: bytes, is_link: bool, dso: _Read | None) -> None:
    """ldconfig's choice among the directory's files and links of one SONAME."""
    if dso is None:
        return
    soname = dso[1]
    if soname is None:
        soname = name
    # A link counts as a link only when it is the SONAME or the "libfoo.so" link for ld(1); any other
    # link is weighed as a file of its own, as ldconfig does.
    if is_link and name != soname and not (name.endswith(b".so") and soname.startswith(name)):
        is_link = False
    if is_link:
        soname = name
    known = libraries.get(soname)
    if known is None:
        libraries[soname] = _Library(name, is_link, dso)
        return
    if (not is_link and known.is_link) or (is_link == known.is_link and libkey(known.name) < libkey(name)):
        # ldconfig 2.36 and older let a plain ELF library and a libc5/libc6 one of the same SONAME take
        # each other's type; any other mismatch keeps the first type (with a warning, there).
        if {known.flags, dso[0]} in ({FLAG_ELF, _FLAG_ELF_LIBC5}, {FLAG_ELF, FLAG_ELF_LIBC6}):
            known.flags = dso[0]
        known.name, known.is_link, known.osversion = name, is_link, dso[2]


def _read_link(rootfs: Rootfs, path: str, release: Release) -> _Read | None:
    """What the link at ``path`` leads to, resolved inside the rootfs; None when it is no library.

    Raises FileNotFoundError or NotADirectoryError when the link leads nowhere. A loop (ELOOP) is no
    library but not dangling either: openat2 says the same of a link through procfs's magic links,
    which the container's ldconfig would follow, and keep.
    """
    try:
        probe = rootfs.open(path)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError:
        return None
    try:
        fd = reopen_regular(probe, path)
    except OSError:
        return None  # a directory, a FIFO, a device: nothing ldconfig could map
    finally:
        os.close(probe)
    return _read_fd(fd, release)


def _read_file(dir_fd: int, name: str, release: Release) -> _Read | None:
    """The same for a file in the directory itself: one component, opened without following links."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    return _read_fd(fd, release)


def _read_fd(fd: int, release: Release) -> _Read | None:
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        dso = read_dso(fd, info.st_size, abi_tag=release.abi_tag)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if dso is None:
        return None
    flags = FLAG_ELF_LIBC6 if release.libc6_only and dso.flags == FLAG_ELF else dso.flags
    return flags, dso.soname, dso.osversion


def _is_dir(rootfs: Rootfs, path: str) -> bool:
    try:
        fd = rootfs.open(path)
    except OSError:
        return False
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def _link(
    rootfs: Rootfs,
    where: tuple[int, str],
    names: tuple[bytes, bytes],
    links: dict[str, str],
    release: Release,
) -> tuple[str, str] | None:
    """ldconfig's ``create_links`` in the directory ``where`` (descriptor, path): for ``names`` (the
    library's file and its SONAME), the (target, path) of the SONAME link to make, unless the SONAME
    already leads to the same file, is a file of its own, or (Debian) is the dynamic loader's."""
    dir_fd, path = where
    name, soname = names
    link_name, target = os.fsdecode(soname), os.fsdecode(name)
    if links.get(link_name) == target:
        return None  # the usual case, settled from the listing: the link is there
    link = f"{path}/{link_name}"
    try:
        info = os.stat(link_name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return target, link  # missing: made
    if not stat.S_ISLNK(info.st_mode):
        return None  # a file of its own: ldconfig leaves it
    try:
        current = rootfs.open(link)
    except OSError:
        return target, link  # a stale link: replaced
    try:
        here = os.fstat(current)
        # The library's own name may be a link weighed as a file: followed, as ldconfig's stat does.
        resolved = rootfs.open(f"{path}/{target}")
        try:
            there = os.fstat(resolved)
        finally:
            os.close(resolved)
    except OSError:
        return None
    finally:
        os.close(current)
    if release.keeps_loader_links and soname in _LOADER_SONAMES:
        return None
    if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
        return target, link
    return None
