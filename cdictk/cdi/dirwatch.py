"""Whether anything changed in a few directories since the last look: inotify, read without blocking.

The library's view of the spec dirs (:class:`cdictk.cdi.specview.SpecDirs`) asks on every call, as
the reference library's cache does, instead of running a thread: a change is seen by the first call after
it, and a view nobody calls costs nothing. Events
are not told apart: any of them means "scan again", and the scan re-reads only the files whose status
changed. A directory that is missing (or removed) is tried again on every look, and its appearance is a
change. Where inotify cannot be had (no instance left, EMFILE), every look is a change: slower, never
stale.

inotify through ctypes, not a package: two calls, and ``os.read`` for the events, are all it takes.
They are bound here rather than with the Linux calls of :mod:`cdictk.startpath.helpers.syscalls`: only
this watch makes them, never a container start.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_MASK = (
    IN_MODIFY
    | IN_ATTRIB  # a chmod or chown can make a spec untrusted
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO  # a spec renamed into place (every atomic writer), or mv'd in from elsewhere
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.inotify_init1.argtypes = (ctypes.c_int,)
_libc.inotify_init1.restype = ctypes.c_int
_libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
_libc.inotify_add_watch.restype = ctypes.c_int


def inotify_init1(flags: int) -> int:
    """A new inotify instance's descriptor; OSError with the errno, as ``os`` raises it."""
    return _checked(_libc.inotify_init1(flags), None)


def inotify_add_watch(fd: int, path: str, mask: int) -> int:
    """The watch descriptor; adding a path watched already returns its descriptor again."""
    return _checked(_libc.inotify_add_watch(fd, os.fsencode(path), mask), path)


def _checked(result: int, path: str | None) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return result


class DirWatch:
    def __init__(self, dirs: Sequence[str]) -> None:
        self.dirs = tuple(dirs)
        self._watched: set[str] = set()
        try:
            self._fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except OSError:
            self._fd = -1
        self._add_missing()

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def changed(self) -> bool:
        """Whether something happened in the directories (or one appeared) since the last call."""
        if self._fd < 0:
            return True
        changed = self._drain()
        if changed:
            # A removed or moved directory lost its watch: add them all again (a directory watched
            # already keeps its watch and gets the same descriptor back).
            self._watched.clear()
        return self._add_missing() or changed

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _drain(self) -> bool:
        seen = False
        while True:
            try:
                if not os.read(self._fd, 1 << 16):
                    return seen
            except BlockingIOError:
                return seen
            seen = True

    def _add_missing(self) -> bool:
        added = False
        for directory in self.dirs:
            if directory in self._watched:
                continue
            try:
                inotify_add_watch(self._fd, directory, _MASK)
            except OSError:
                continue  # missing or not a directory: tried again at the next look
            self._watched.add(directory)
            added = True
        return added
