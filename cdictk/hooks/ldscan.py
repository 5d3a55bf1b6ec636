"""Start path: standard library only.

What glibc's ldconfig would put in a container's ld.so.cache, found without running it.

The directories come from ``/etc/ld.so.conf`` and its includes, in ldconfig's order, then the built-in
system directories of the ldconfig this stands in for; a directory reached twice (a merged ``/usr``
link) counts once, under its first name. In each directory the shared objects are chosen as ldconfig
chooses them (a file before a link to it, the newer version of one SONAME, a ``libfoo.so`` development
link as a name of its own) and the missing SONAME links are listed for the caller to make. Everything
is resolved inside the rootfs and read through :mod:`cdictk.elfdso`; nothing in the image runs.

What ldconfig does that this does not attempt raises :class:`Unsupported` so that the caller can run
ldconfig instead: glibc-hwcaps and legacy hwcap subdirectories, ``dir=type`` lines, a configuration
file that is not a regular file, and patterns glob(3) would expand in a directory name. Stale links
are left alone (ldconfig deletes them).
"""

from __future__ import annotations

import os
import stat

from cdictk.elfdso import FLAG_ELF, FLAG_ELF_LIBC6, read_dso
from cdictk.hooks import ldconf
from cdictk.hooks.ldsocache import CacheEntry, libkey
from cdictk.rootfs import Rootfs, reopen_regular

LD_SO_CONF = "/etc/ld.so.conf"
MAX_CACHE_SIZE = 64 << 20  # the image's old cache, read for the name of its writer
_MAX_CONF_SIZE = 64 << 10
_MAX_CONFS = 256  # files read through includes; a real image has a few dozen
_MAX_DIRS = 256
_MAX_ENTRIES = 1 << 16  # directory entries looked at, over all directories
_FLAG_ELF_LIBC5 = 0x0002
# Names ldconfig treats as hwcap or platform subdirectories (x86 and the legacy "tls"); a superset is
# harmless: meeting one only hands the work back to ldconfig.
_HWCAP_NAMES = frozenset(
    {"tls", "x86_64", "avx512_1", "haswell", "xeon_phi", "i386", "i486", "i586", "i686", "aarch64"}
)


class Unsupported(Exception):
    """The image asks for something only ldconfig itself does; the message says what."""


# Plain classes: dataclasses costs the hook milliseconds of imports on every container start.


class Scan:
    __slots__ = ("entries", "links")

    def __init__(self) -> None:
        self.entries: list[CacheEntry] = []  # in the order ldconfig adds them
        self.links: list[tuple[str, str]] = []  # (target, link path) to make


class _Dir:
    __slots__ = ("key", "path")

    def __init__(self, path: str, key: tuple[int, int]) -> None:
        self.path = path  # as configured, trailing slashes stripped
        self.key = key


class _Library:
    __slots__ = ("flags", "is_link", "name")

    def __init__(self, name: bytes, is_link: bool, flags: int) -> None:
        self.name = name
        self.is_link = is_link
        self.flags = flags


def scan(rootfs: Rootfs, system_dirs: tuple[str, ...], conf: str = LD_SO_CONF) -> Scan:
    """The cache entries and SONAME links for the image at ``rootfs``, as the ldconfig whose built-in
    directories are ``system_dirs`` would find them with ``-f conf``."""
    dirs: list[_Dir] = []
    _read_conf(rootfs, conf, dirs, [0])
    for system_dir in system_dirs:
        _add_dir(rootfs, system_dir, dirs)
    result = Scan()
    budget = [_MAX_ENTRIES]
    for directory in dirs:
        _scan_dir(rootfs, directory.path, result, budget)
    return result


def _read_conf(rootfs: Rootfs, path: str, dirs: list[_Dir], count: list[int]) -> None:
    count[0] += 1
    if count[0] > _MAX_CONFS:
        raise Unsupported(f"more than {_MAX_CONFS} configuration files")
    try:
        fd = rootfs.open(path)
    except OSError:
        return  # ldconfig skips what it cannot open
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISDIR(mode):
        if count[0] == 1:  # ld.so.conf itself: ldconfig would skip every drop-in, the hook's own
            raise Unsupported(f"{path} is a directory")
        return  # an included directory gives ldconfig nothing to read
    if not stat.S_ISREG(mode):
        raise Unsupported(f"{path} is not a regular file")
    try:
        data = rootfs.read_regular(path, _MAX_CONF_SIZE, same_mount=True)
    except OSError as exc:
        raise Unsupported(f"{path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    for raw in lines:
        line = raw.partition(b"#")[0].lstrip(b" \t\n\v\f\r")
        if not line:
            continue
        if line[:7] == b"include" and line[7:8] in (b" ", b"\t"):
            for pattern in ldconf.includes(path, [raw]):
                if any(c in pattern.rpartition("/")[0] for c in "*?[\\") or "[" in pattern:
                    raise Unsupported(f"{path}: include pattern {pattern!r}")
                for match in ldconf.glob(rootfs, pattern, _MAX_ENTRIES)[0]:
                    _read_conf(rootfs, match, dirs, count)
        elif line[:5].lower() == b"hwcap" and line[5:6] in (b" ", b"\t"):
            continue  # ldconfig ignores it, with a warning
        else:
            if b"=" in line:
                raise Unsupported(
                    f"{path}: a directory with a library type ({line.decode(errors='replace')})"
                )
            _add_dir(rootfs, os.fsdecode(line), dirs)


def _add_dir(rootfs: Rootfs, line: str, dirs: list[_Dir]) -> None:
    """ldconfig's ``add_dir``: trailing blanks and slashes stripped, a missing path skipped, a
    directory already listed (the same inode) kept under its first name."""
    path = line.rstrip(" \t\n\v\f\r").rstrip("/")
    if not path:
        return
    try:
        fd = rootfs.open(path)
    except OSError:
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
    if any(part in _HWCAP_NAMES for part in path.split("/")[1:]):
        raise Unsupported(f"{path}: a hwcap directory")
    if stat.S_ISDIR(info.st_mode) and _exists(rootfs, f"{path}/glibc-hwcaps"):
        raise Unsupported(f"{path}/glibc-hwcaps")
    dirs.append(_Dir(path, key))


def _exists(rootfs: Rootfs, path: str) -> bool:
    try:
        os.close(rootfs.open(path))
    except OSError:
        return False
    return True


def is_dso(name: bytes) -> bool:
    """glibc's ``_dl_is_dso``: lib*.so*, ld-*.so*, ld.so.*, ld64.so.*."""
    return (name.startswith((b"lib", b"ld-")) and b".so" in name) or name.startswith((b"ld.so.", b"ld64.so."))


def _scan_dir(rootfs: Rootfs, path: str, result: Scan, budget: list[int]) -> None:
    try:
        dir_fd = rootfs.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with os.scandir(dir_fd) as listing:
            entries = list(listing)
        budget[0] -= len(entries)
        if budget[0] < 0:
            raise Unsupported(f"more than {_MAX_ENTRIES} directory entries")
        # Files first, so that a link to a file of the same directory (libfoo.so.1 -> libfoo.so.1.2.3,
        # most links) reuses what was read from it instead of resolving and reading it again.
        files: dict[str, tuple[int, bytes | None] | None] = {}
        libraries: dict[bytes, _Library] = {}
        links: dict[str, str] = {}
        for entry in entries:
            kind = _kind(rootfs, path, entry)
            if kind == "file":
                files[entry.name] = _read_file(dir_fd, entry.name)
                _choose(libraries, os.fsencode(entry.name), False, files[entry.name])
            elif kind == "link":
                try:
                    links[entry.name] = os.readlink(entry.name, dir_fd=dir_fd)
                except OSError:
                    continue
        for name, target in links.items():
            if "/" not in target and target in files:
                dso = files[target]
            else:
                dso = _read_link(rootfs, f"{path}/{name}")
            _choose(libraries, os.fsencode(name), True, dso)
        for soname, library in libraries.items():
            if not library.is_link and soname != library.name:
                _link(rootfs, (dir_fd, path), (library.name, soname), links, result)
            result.entries.append(CacheEntry(soname, os.fsencode(path) + b"/" + soname, library.flags))
    finally:
        os.close(dir_fd)


def _kind(rootfs: Rootfs, path: str, entry: os.DirEntry[str]) -> str | None:
    """ "file" or "link" for an entry ldconfig reads as a library; None for one it passes over."""
    name = os.fsencode(entry.name)
    is_link = entry.is_symlink()
    is_regular = not is_link and entry.is_file(follow_symlinks=False)
    is_dir = not is_link and entry.is_dir(follow_symlinks=False)
    if not (is_link or is_regular or is_dir):
        return None
    if entry.name in _HWCAP_NAMES and not is_regular and _is_dir(rootfs, f"{path}/{entry.name}"):
        raise Unsupported(f"{path}/{entry.name}: a hwcap subdirectory")
    if not is_dso(name) or is_dir:
        return None
    if name.endswith(b".#prelink#") or (len(name) >= 17 and name[-17:-6] == b".#prelink#."):
        return None  # prelink's temporary files
    return "link" if is_link else "file"


def _choose(
    libraries: dict[bytes, _Library], name: bytes, is_link: bool, dso: tuple[int, bytes | None] | None
) -> None:
    """ldconfig's choice among the directory's files and links of one SONAME."""
    if dso is None:
        return
    flags, soname = dso
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
        libraries[soname] = _Library(name, is_link, flags)
        return
    if (not is_link and known.is_link) or (is_link == known.is_link and libkey(known.name) < libkey(name)):
        # ldconfig lets a plain ELF library and a libc5/libc6 one of the same SONAME take each
        # other's type; any other mismatch keeps the first type (with a warning, there).
        if {known.flags, flags} in ({FLAG_ELF, _FLAG_ELF_LIBC5}, {FLAG_ELF, FLAG_ELF_LIBC6}):
            known.flags = flags
        known.name, known.is_link = name, is_link


def _read_link(rootfs: Rootfs, path: str) -> tuple[int, bytes | None] | None:
    """The flags and SONAME of what the link at ``path`` leads to, resolved inside the rootfs."""
    try:
        probe = rootfs.open(path)
    except OSError:
        return None  # a dangling link
    try:
        fd = reopen_regular(probe, path)
    except OSError:
        return None  # a directory, a FIFO, a device: nothing ldconfig could map
    finally:
        os.close(probe)
    return _read_fd(fd)


def _read_file(dir_fd: int, name: str) -> tuple[int, bytes | None] | None:
    """The same for a file in the directory itself: one component, opened without following links."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    return _read_fd(fd)


def _read_fd(fd: int) -> tuple[int, bytes | None] | None:
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        dso = read_dso(fd, info.st_size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return None if dso is None else (dso.flags, dso.soname)


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
    result: Scan,
) -> None:
    """ldconfig's ``create_links`` in the directory ``where`` (descriptor, path): for ``names`` (the
    library's file and its SONAME), the SONAME link to the file unless the SONAME already leads to the
    same file, or is a file of its own."""
    dir_fd, path = where
    name, soname = names
    link_name, target = os.fsdecode(soname), os.fsdecode(name)
    if links.get(link_name) == target:
        return  # the usual case, settled from the listing: the link is there
    link = f"{path}/{link_name}"
    try:
        info = os.stat(link_name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        result.links.append((target, link))  # missing: made
        return
    if not stat.S_ISLNK(info.st_mode):
        return  # a file of its own: ldconfig leaves it
    try:
        current = rootfs.open(link)
    except OSError:
        result.links.append((target, link))  # a stale link: replaced
        return
    try:
        here = os.fstat(current)
        # The library's own name may be a link weighed as a file: followed, as ldconfig's stat does.
        resolved = rootfs.open(f"{path}/{target}")
        try:
            there = os.fstat(resolved)
        finally:
            os.close(resolved)
    except OSError:
        return
    finally:
        os.close(current)
    if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
        result.links.append((target, link))
