"""What was parsed on an earlier container start, kept in a root-only directory.

Parsing the settings (TOML) and the specs (YAML, then the CDI model and its checks) costs tens of
milliseconds of imports on every container start, for files that change a few times a year. Each
entry holds the exact text it was made from (its *key*) and what came out: an entry is used only
when the key equals what the files hold now, so there are no timestamps to trust and an edit is
seen at once.

The directory is ``/run/cdictk`` for root (tmpfs: a reboot clears it); ``CDICTK_CACHE_DIR`` names
another, and an empty value turns the cache off. An entry is only read from a directory and file
owned by this user that no one else can write, under parents only root (or this user) could change
(:mod:`cdictk.startpath.trust`); the directory is opened once with ``O_NOFOLLOW`` and used through that
descriptor alone, so a directory swapped for a link after the check is never used. Anything odd (a
foreign owner, a link, a torn or malformed file) makes the entry a miss, never an error: the files
are parsed as if there were no cache. Entries are written to a temporary file, fsynced and renamed.
Standard library only.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers import strictjson
from cdictk.startpath.helpers.fsutil import make_dirs, read_fd
from cdictk.startpath.trust import path_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_DIR = "/run/cdictk"
MAX_ENTRY = 16 << 20


def entry_name(kind: str, source: str) -> str:
    """A file name for the entry of ``kind`` made from ``source`` (a path, a list of dirs).

    One entry per source, so that two settings files (or spec dir lists) in use on one node do not
    evict each other. FNV-1a, not a cryptographic hash: the key inside the entry is what is trusted,
    the name only spreads the entries.
    """
    value = 0xCBF29CE484222325
    for byte in source.encode("utf-8", "surrogateescape"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{kind}-{value:016x}"


class ParseCache:
    """Named entries in ``directory``; ``None`` caches nothing."""

    __slots__ = ("directory",)

    def __init__(self, directory: str | None) -> None:
        self.directory = directory or None

    @classmethod
    def from_environment(cls) -> ParseCache:
        named = os.environ.get("CDICTK_CACHE_DIR")
        if named is not None:
            return cls(named if named.startswith("/") else None)
        return cls(DEFAULT_DIR if os.geteuid() == 0 else None)

    def load(self, name: str, key: Any) -> Any:
        """The value stored under ``name`` for ``key``; None when there is none to trust."""
        directory = self._open_directory(create=False)
        if directory is None:
            return None
        try:
            fd = os.open(
                name + ".json",
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                dir_fd=directory,
            )
        except OSError:
            return None
        finally:
            os.close(directory)
        try:
            if not _private(fd, stat.S_IFREG) or os.fstat(fd).st_size > MAX_ENTRY:
                return None
            data = read_fd(fd, MAX_ENTRY)
            if data is None:
                return None
            entry = strictjson.parse(data)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        return entry.get("value")

    def store(self, name: str, key: Any, value: Any) -> None:
        """Keep ``value`` for ``key`` under ``name``; a failure only means no entry."""
        if self.directory is None:
            return
        try:
            data = strictjson.dumps({"key": key, "value": value})
        except ValueError:
            return
        if len(data) > MAX_ENTRY:  # load would refuse it: rewriting it every start helps no one
            return
        directory = self._open_directory(create=True)
        if directory is None:
            return
        entry = name + ".json"
        tmp = f"{entry}.{os.urandom(6).hex()}.tmp"
        try:
            try:
                fd = os.open(
                    tmp,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=directory,
                )
            except OSError:
                return
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, entry, src_dir_fd=directory, dst_dir_fd=directory)
            except OSError:
                try:  # noqa: SIM105 - contextlib is one more import on every container start
                    os.unlink(tmp, dir_fd=directory)
                except OSError:
                    pass
        finally:
            os.close(directory)

    def _open_directory(self, *, create: bool) -> int | None:
        """A descriptor of the directory when it is ours alone, or None.

        Its parents first, by path: if someone else could rename the directory or a parent, the
        directory could be theirs by the time it is used. Then the directory is opened once without
        following a link, checked through the descriptor and used only through it: one swapped for a
        link after the check is never read or written.
        """
        if self.directory is None:
            return None
        directory = os.path.abspath(self.directory)
        try:
            if create and not os.path.lexists(directory):
                existing = os.path.dirname(directory)
                while not os.path.lexists(existing):
                    existing = os.path.dirname(existing)
                # Nothing is made under a directory someone else could have pointed elsewhere.
                if path_problem(existing, leaf_sticky_ok=True):
                    return None
                # 0700 for the parents it makes too: nothing under them is anyone else's business.
                make_dirs(directory, 0o700)
            if path_problem(os.path.dirname(directory), leaf_sticky_ok=True):
                return None
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        if not _private(fd, stat.S_IFDIR):
            os.close(fd)
            return None
        return fd


def _private(fd: int, kind: int) -> bool:
    """Whether the open ``fd`` is of ``kind``, ours, and writable by no one else."""
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and not st.st_mode & 0o022
