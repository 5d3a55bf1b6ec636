"""What keeps a :class:`cdictk.cdi.specview.SpecDirs` current: its scans and the watch on its dirs.

A scan loads the spec dirs with the registry (:mod:`cdictk.cdi.registry`, the same loader as every
command) but re-reads only the files whose inode, size, mtime or ctime changed since the last scan,
reusing what the others gave (their spec or their error); files gone from the dirs are forgotten.
With a watch, :meth:`Rescan.changed` asks inotify (:mod:`cdictk.cdi.dirwatch`) whether a dir changed,
without blocking and without a thread. The lock serialises the view's scans and looks.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from cdictk.cdi.dirwatch import DirWatch
from cdictk.cdi.load import load_spec
from cdictk.cdi.model import Spec
from cdictk.cdi.registry import Registry, read_registry
from cdictk.startpath.helpers.errors import CdictkError

Stamp = tuple[int, int, int, int, int]


class Rescan:
    def __init__(self, dirs: Sequence[str], *, watch: bool) -> None:
        self.dirs = tuple(dirs)
        self.lock = threading.RLock()
        self.reads = 0  # spec files parsed so far: what a change costs, for tests and the benchmark
        self._known: dict[str, tuple[Stamp, Spec | CdictkError]] = {}
        self._next: dict[str, tuple[Stamp, Spec | CdictkError]] = {}
        self._watch = DirWatch(self.dirs) if watch else None

    @property
    def watching(self) -> bool:
        return self._watch is not None

    def changed(self) -> bool:
        """Whether a dir changed since the last look (always False without a watch)."""
        return self._watch is not None and self._watch.changed()

    def registry(self, *, require_dirs: bool, trusted_only: bool) -> Registry:
        """The dirs loaded again, each unchanged file's result reused."""
        self._next = {}
        registry = read_registry(self.dirs, self._load, require_dirs=require_dirs, trusted_only=trusted_only)
        self._known, self._next = self._next, {}
        return registry

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()

    def _load(self, path: str) -> Spec:
        """The spec at ``path``, parsed again only when the file changed since the last scan."""
        try:
            info = os.stat(path)
        except OSError as exc:
            raise CdictkError(path, "", exc.strerror or str(exc)) from exc
        stamp = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        known = self._known.get(path)
        if known is not None and known[0] == stamp:
            result = known[1]
        else:
            self.reads += 1
            try:
                result = load_spec(path)
            except CdictkError as exc:
                result = exc
        self._next[path] = (stamp, result)
        if isinstance(result, CdictkError):
            raise result.with_traceback(None)
        return result
