"""What was parsed on an earlier container start, kept in a root-only directory.

Parsing the settings (TOML) and the specs (YAML, then the CDI model and its checks) costs tens of
milliseconds of imports on every container start, for files that change a few times a year. Each
entry holds the exact text it was made from (its *key*) and what came out: an entry is used only
when the key equals what the files hold now, so there are no timestamps to trust and an edit is
seen at once.

The directory is ``/run/cdictk`` for root (tmpfs: a reboot clears it); ``CDICTK_CACHE_DIR`` names
another, and an empty value turns the cache off. An entry is only read from a directory and file
owned by this user that no one else can write, through ``O_NOFOLLOW``; anything odd (a foreign
owner, a link, a torn or malformed file) makes the entry a miss, never an error: the files are
parsed as if there were no cache. Entries are written to a temporary file, fsynced and renamed.
Standard library only.
"""

from __future__ import annotations

import os
import stat

from cdictk import strictjson
from cdictk.fsutil import read_fd

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
        if self.directory is None or not _private(self.directory, os.lstat, stat.S_IFDIR):
            return None
        try:
            fd = os.open(
                os.path.join(self.directory, name + ".json"),
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
            )
        except OSError:
            return None
        try:
            if not _private(fd, os.fstat, stat.S_IFREG) or os.fstat(fd).st_size > MAX_ENTRY:
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
            if len(data) > MAX_ENTRY:  # load would refuse it: rewriting it every start helps no one
                return
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
        except (OSError, ValueError):
            return
        if not _private(self.directory, os.lstat, stat.S_IFDIR):
            return
        path = os.path.join(self.directory, name + ".json")
        tmp = f"{path}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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
            os.rename(tmp, path)
        except OSError:
            try:  # noqa: SIM105 - contextlib is one more import on every container start
                os.unlink(tmp)
            except OSError:
                pass


def _private(target: Any, stat_of: Any, kind: int) -> bool:
    """Whether ``target`` is of ``kind`` (lstat: not a link), ours, and writable by no one else."""
    try:
        st = stat_of(target)
    except OSError:
        return False
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and not st.st_mode & 0o022
