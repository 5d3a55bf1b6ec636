"""The spec directories' devices: :class:`SpecDirs`, the one view of them every part of cdictk holds.

What a CDI-aware runtime would see in the spec dirs: every device by qualified name, loaded strictly
with the reference library's priority and conflict rules (:mod:`cdictk.cdi.registry`), and the
problems of the dirs. ``cdictk cdi list/validate/inject``, ``cdictk info``, the device plugin and the
library (``cdictk.api.SpecDirs``) resolve CDI names here.

Its cached form is the index (:class:`cdictk.startpath.specs.index.SpecIndex`): the records a view
holds, which a container start (the runtime shim, podman's precreate hook, the legacy prestart hook)
reads from the parse cache without this module, PyYAML or the model. :meth:`SpecDirs.load` holds one
index, scanned or read back; a view kept current scans again with :meth:`SpecDirs.refresh`, re-parsing
only the files that changed (:mod:`cdictk.cdi.rescan`), and with ``auto_refresh`` every call first asks
inotify whether a spec dir changed. Either way each scan makes a whole new index.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.model import Device, Spec
from cdictk.cdi.registry import DEFAULT_SPEC_DIRS
from cdictk.cdi.rescan import Rescan
from cdictk.cdi.scan import index_data, scan, spec_data
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.specs.apply import EditsSource, apply_edits
from cdictk.startpath.specs.index import SpecIndex, spec_dir_names
from cdictk.startpath.specs.mountcheck import check_host_paths
from cdictk.startpath.specs.parsecache import ParseCache


class ClosedError(CdictkError):
    def __init__(self) -> None:
        super().__init__("", "", "the spec dirs' view is closed")


class SpecDirs:
    """The devices of ``spec_dirs`` (in priority order: a later dir wins), scanned now.

    ``auto_refresh``: every call first asks inotify whether a spec dir changed, and scans again if so;
    otherwise only :meth:`refresh` scans. ``trusted_only``: skip the spec files someone other than root
    could change (:mod:`cdictk.startpath.specs.specdirs`). ``require_dirs``: a spec dir that does not
    exist is a problem. :meth:`load` gives the same view from the stored index. Thread-safe: a scan
    replaces the whole index at once, under the lock of its :class:`~cdictk.cdi.rescan.Rescan`.
    """

    __slots__ = ("_closed", "_index", "_require_dirs", "_rescan", "dirs", "trusted_only")

    def __init__(
        self,
        spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS,
        auto_refresh: bool = True,
        *,
        trusted_only: bool = True,
        require_dirs: bool = False,
    ) -> None:
        dirs = spec_dir_names(spec_dirs)
        self._setup(SpecIndex(dirs, [], {}, []), trusted_only, require_dirs, Rescan(dirs, watch=auto_refresh))
        self.refresh()

    @classmethod
    def load(
        cls,
        spec_dirs: Sequence[str],
        store: ParseCache | None = None,
        *,
        require_dirs: bool = False,
        trusted_only: bool = True,
    ) -> SpecDirs:
        """The spec dirs as they are now, not kept current: from ``store`` when the spec files are what
        its index was built from, else scanned (and the index stored): :meth:`SpecIndex.load`. What
        every command holds."""
        index = SpecIndex.load(spec_dirs, _scan, store, require_dirs=require_dirs, trusted_only=trusted_only)
        view = cls.__new__(cls)
        view._setup(index, trusted_only, require_dirs, None)
        return view

    def _setup(self, index: SpecIndex, trusted_only: bool, require_dirs: bool, rescan: Rescan | None) -> None:
        self.dirs = index.dirs
        self.trusted_only = trusted_only
        self._require_dirs = require_dirs
        self._rescan = rescan
        self._closed = False
        self._index = index

    def refresh(self) -> None:
        """Scan the spec dirs now; a view kept current re-parses only the files that changed."""
        self._open()
        rescan = self._rescan
        if rescan is None:
            data = scan(self.dirs, require_dirs=self._require_dirs, trusted_only=self.trusted_only)
            self._index = SpecIndex.built(self.dirs, data)
            return
        with rescan.lock:
            self._rescanned(rescan)

    @property
    def reads(self) -> int:
        """The spec files parsed by this view's scans so far: what a change costs."""
        return 0 if self._rescan is None else self._rescan.reads

    def devices(self) -> list[str]:
        """The qualified names of every device a runtime would resolve, sorted."""
        return sorted(self._now().devices)

    def device(self, name: str) -> Device | None:
        """A copy of the device ``name`` (``vendor/class=name``) resolves to, or None."""
        found = self._now().devices.get(name)
        if found is None:
            return None
        device: dict[str, Any] = {"name": name.partition("=")[2], "containerEdits": found.edits}
        if found.annotations:
            device["annotations"] = found.annotations
        return decode_spec({"kind": found.spec.kind, "devices": [device]}, found.spec.path).devices[0]

    def spec_file(self, name: str) -> str | None:
        """The file that defines device ``name``, or None."""
        found = self._now().devices.get(name)
        return None if found is None else found.spec.path

    def errors(self) -> list[Problem]:
        """What is wrong in the spec dirs: files that do not load, conflicts, dirs that cannot be read,
        files skipped for trust. Their devices are left out; every other device is there."""
        return list(self._now().problems)

    def untrusted(self) -> list[Problem]:
        """The spec files and directories skipped because someone other than root could change them."""
        return self._now().untrusted()

    def has_kind(self, kind: str) -> bool:
        return self._now().has_kind(kind)

    def resolve(self, requested: Sequence[str]) -> list[EditsSource]:
        """The edit blocks for ``requested`` in the reference library's order
        (:meth:`SpecIndex.resolve`). The edits are this view's own: trimming them changes the view, so
        use it for one container."""
        return self._now().resolve(requested)

    def apply_to(self, config: dict[str, Any], requested: Sequence[str], config_file: str) -> bool:
        """Apply the ``requested`` devices to the OCI ``config`` in place, all or none of them (False:
        it held them already): what ``cdictk cdi inject`` does. A host path that is no longer root's
        alone (:mod:`cdictk.startpath.specs.mountcheck`) refuses them all."""
        sources = self.resolve(requested)
        check_host_paths(sources)
        return apply_edits(config, sources, config_file)

    def inject(self, oci_config: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
        """A copy of ``oci_config`` with the devices ``names`` applied (:meth:`apply_to`); the input is
        never changed. All or nothing: UnresolvedDevicesError names the devices no spec defines."""
        config = copy.deepcopy(oci_config)
        self.apply_to(config, names, "<oci config>")
        return config

    def with_spec(self, spec: Spec, path: str) -> SpecDirs:
        """A view that also holds ``spec`` (made in memory; ``path`` names it), above every spec dir.
        The view returned is not kept current."""
        view = SpecDirs.__new__(SpecDirs)
        index = self._now().with_spec_data(spec_data(spec), path)
        view._setup(index, self.trusted_only, self._require_dirs, None)
        return view

    def close(self) -> None:
        """Stop watching; later calls raise ClosedError."""
        self._closed = True
        if self._rescan is not None:
            self._rescan.close()

    def __enter__(self) -> SpecDirs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _open(self) -> None:
        if self._closed:
            raise ClosedError

    def _now(self) -> SpecIndex:
        """The current index; first scanned again if the view is kept current and a dir changed."""
        self._open()
        rescan = self._rescan
        if rescan is not None and rescan.watching:
            with rescan.lock:
                if rescan.changed():
                    self._rescanned(rescan)
        return self._index

    def _rescanned(self, rescan: Rescan) -> None:
        registry = rescan.registry(require_dirs=self._require_dirs, trusted_only=self.trusted_only)
        self._index = SpecIndex.built(self.dirs, index_data(registry))


def _scan(dirs: tuple[str, ...], require_dirs: bool, trusted_only: bool) -> dict[str, Any]:
    """:func:`cdictk.cdi.scan.scan` in the shape :meth:`SpecIndex.load` calls it."""
    return scan(dirs, require_dirs=require_dirs, trusted_only=trusted_only)
