"""Whether anything changed in a few directories since the last look: inotify, read without blocking.

The library's view of the spec dirs (:class:`cdictk.cdi.specview.SpecDirs`) asks on every call, as
the reference library's cache does, instead of running a thread: a change is seen by the first call after
it, and a view nobody calls costs nothing. Events
are not told apart: any of them means "scan again", and the scan re-reads only the files whose status
changed. A directory that is missing (or removed) is tried again on every look, and its appearance is a
change. Where inotify cannot be had (no instance left, EMFILE), every look is a change: slower, never
stale.

inotify through ctypes (:mod:`cdictk.startpath.helpers.syscalls`), not a package: two calls, and ``os.read``
for the events, are all it takes, and cdictk's other Linux calls live there already.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cdictk.startpath.helpers import syscalls

_MASK = (
    syscalls.IN_MODIFY
    | syscalls.IN_ATTRIB  # a chmod or chown can make a spec untrusted
    | syscalls.IN_CLOSE_WRITE
    | syscalls.IN_MOVED_FROM
    | syscalls.IN_MOVED_TO  # a spec renamed into place (every atomic writer), or mv'd in from elsewhere
    | syscalls.IN_CREATE
    | syscalls.IN_DELETE
    | syscalls.IN_DELETE_SELF
    | syscalls.IN_MOVE_SELF
    | syscalls.IN_ONLYDIR
)


class DirWatch:
    def __init__(self, dirs: Sequence[str]) -> None:
        self.dirs = tuple(dirs)
        self._watched: set[str] = set()
        try:
            self._fd = syscalls.inotify_init1(syscalls.IN_NONBLOCK | syscalls.IN_CLOEXEC)
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
                syscalls.inotify_add_watch(self._fd, directory, _MASK)
            except OSError:
                continue  # missing or not a directory: tried again at the next look
            self._watched.add(directory)
            added = True
        return added
