"""The consumer's spec cache for long-running programs: the registry kept current as spec files change.

What a runtime, a node agent or a test rig holds: the devices of the spec dirs with the reference
library's priority and conflict rules (:mod:`cdictk.cdi.registry`, the same loader as every command),
the problems of each file, and injection through the same engine as ``cdictk cdi inject``
(:meth:`cdictk.cdi.cache.SpecCache.inject`). With ``auto_refresh`` every call first asks inotify
(:mod:`cdictk.cdi.dirwatch`) whether a spec dir changed, and scans again if so; a scan re-reads only
the files whose inode, size, mtime or ctime changed and reuses what the others gave (their spec or
their error). Without it, only :meth:`LiveSpecs.refresh` scans. Thread-safe: one lock around each call.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Sequence
from typing import Any

from cdictk.cdi.cache import SpecCache, cache_data
from cdictk.cdi.dirwatch import DirWatch
from cdictk.cdi.load import load_spec
from cdictk.cdi.model import Device, Spec
from cdictk.cdi.registry import Registry, read_registry
from cdictk.cdi.specdirs import DEFAULT_SPEC_DIRS
from cdictk.errors import CdictkError, Problem

Stamp = tuple[int, int, int, int, int]


class ClosedError(CdictkError):
    def __init__(self) -> None:
        super().__init__("", "", "the spec cache is closed")


class LiveSpecs:
    """The spec dirs as a runtime sees them, kept current; ``cdictk.api.SpecCache``."""

    def __init__(
        self,
        spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS,
        auto_refresh: bool = True,
        *,
        trusted_only: bool = True,
    ) -> None:
        self.spec_dirs = tuple(os.path.normpath(directory) for directory in spec_dirs)
        self.trusted_only = trusted_only
        self.reads = 0  # spec files parsed so far: what a change costs, for tests and the benchmark
        self._lock = threading.RLock()
        self._known: dict[str, tuple[Stamp, Spec | CdictkError]] = {}
        self._next: dict[str, tuple[Stamp, Spec | CdictkError]] = {}
        self._watch = DirWatch(self.spec_dirs) if auto_refresh else None
        self._registry = Registry(self.spec_dirs)
        self._index: SpecCache | None = None
        self._closed = False
        self._scan()

    def refresh(self) -> None:
        """Scan the spec dirs now (the only way without ``auto_refresh``)."""
        with self._lock:
            self._open()
            self._scan()

    def devices(self) -> list[str]:
        """The qualified names of every device a runtime would resolve, sorted."""
        with self._lock:
            return self._current().device_names()

    def device(self, name: str) -> Device | None:
        """A copy of the device ``name`` (``vendor/class=name``) resolves to, or None."""
        with self._lock:
            found = self._current().devices.get(name)
            return None if found is None else copy.deepcopy(found.device)

    def spec_file(self, name: str) -> str | None:
        """The file that defines device ``name``, or None."""
        with self._lock:
            found = self._current().devices.get(name)
            return None if found is None else found.spec_file.path

    def errors(self) -> list[Problem]:
        """What is wrong in the spec dirs: files that do not load, conflicts, dirs that cannot be read,
        files skipped for trust. Their devices are left out; every other device is there."""
        with self._lock:
            return list(self._current().problems)

    def inject(self, oci_config: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
        """A copy of ``oci_config`` with the devices ``names`` applied; the input is never changed. All
        or nothing: UnresolvedDevicesError names the devices no spec defines."""
        with self._lock:
            registry = self._current()
            if self._index is None:
                self._index = SpecCache(cache_data(registry))
            index = self._index
        config = copy.deepcopy(oci_config)
        index.inject(config, names, "<oci config>")
        return config

    def close(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.close()
            self._closed = True

    def __enter__(self) -> LiveSpecs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _open(self) -> None:
        if self._closed:
            raise ClosedError

    def _current(self) -> Registry:
        self._open()
        if self._watch is not None and self._watch.changed():
            self._scan()
        return self._registry

    def _scan(self) -> None:
        self._next = {}
        registry = read_registry(self.spec_dirs, self._load, trusted_only=self.trusted_only)
        self._known, self._next = self._next, {}  # files gone from the dirs are forgotten
        self._registry, self._index = registry, None

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
