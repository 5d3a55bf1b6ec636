"""The spec dirs' stored index: :class:`SpecIndex`, the cached form of :class:`cdictk.cdi.specview.SpecDirs`.

``SpecDirs`` is the one view of the spec dirs (every device by qualified name, loaded strictly with the
reference library's priority and conflict rules, and the problems of the dirs); this is what a
container start holds of it: its records, kept on disk in the parse cache
(:mod:`cdictk.startpath.specs.parsecache`), and the questions the runtime shim, podman's precreate
hook and the legacy prestart hook ask (resolve names, a kind's common edits, the untrusted files).
Each device's edits and its spec's common edits are in the spec's JSON shape, which
:func:`cdictk.startpath.specs.apply.apply_edits` reads. Loading it again is one JSON read, so a start
skips PyYAML and the model once the spec dirs have been seen; on a miss the scan it is handed builds
it (:mod:`cdictk.cdi.scan`, off the start path, which writes the stored form this module reads).

The cache key is the text of every spec file (and what went wrong reading a directory or a file), so
any edit, a new file or a removed one rebuilds the index, and the size and mtime of the code that
builds it (the CDI core), so an upgrade does too. An index is only kept when no spec file changed
while it was built (their inode, size, mtime and ctime before and after): a file rewritten under the
loader, even with the same text in the end, would otherwise leave a torn read cached. A stored entry of
the wrong shape, down to one field of one record, is a miss.
"""

from __future__ import annotations

import os
import stat

from cdictk import __version__
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.helpers.fsutil import read_fd
from cdictk.startpath.specs.apply import EditsSource
from cdictk.startpath.specs.names import parse_qualified_name, split_kind
from cdictk.startpath.specs.specdirs import MAX_SPEC_BYTES, spec_paths, untrusted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from cdictk.startpath.misses import ScanSpecs
    from cdictk.startpath.specs.parsecache import ParseCache

ENTRY = "spec-index"
_HERE = os.path.dirname(os.path.abspath(__file__))
# The CDI core's folders, found without importing cdictk.cdi: a change to a module in them (an upgrade)
# makes the index anew. cdictk/cdi parses and checks specs; this package names and applies them.
CORE_DIRECTORIES = (os.path.join(os.path.dirname(os.path.dirname(_HERE)), "cdi"), _HERE)
_FORMAT = 5


class UnresolvedDevicesError(CdictkError):
    def __init__(self, names: Sequence[str], hint: str) -> None:
        plural = "s" if len(names) > 1 else ""
        super().__init__(", ".join(names), "", f"unresolvable CDI device{plural}{hint}")
        self.names = list(names)


class SpecRecord:
    """One spec file that loaded: its path, its kind and its own container edits (JSON shape)."""

    __slots__ = ("edits", "kind", "path")

    def __init__(self, path: str, kind: str, edits: dict[str, Any]) -> None:
        self.path = path
        self.kind = kind
        self.edits = edits

    @classmethod
    def from_data(cls, data: Any) -> SpecRecord | None:
        """The record ``data`` holds, or None when it has another shape."""
        if type(data) is not dict or data.keys() != _SPEC_KEYS:
            return None
        path, kind, edits = data["path"], data["kind"], data["edits"]
        if type(path) is not str or type(kind) is not str or type(edits) is not dict:
            return None
        return cls(path, kind, edits)


class DeviceRecord:
    """One device a qualified name resolves to: its spec, its position there (for messages), its
    container edits (JSON shape) and its annotations."""

    __slots__ = ("annotations", "edits", "index", "spec")

    def __init__(
        self, spec: SpecRecord, index: int, edits: dict[str, Any], annotations: dict[str, str]
    ) -> None:
        self.spec = spec
        self.index = index
        self.edits = edits
        self.annotations = annotations

    @classmethod
    def from_data(cls, data: Any, specs: list[SpecRecord]) -> DeviceRecord | None:
        """The record ``data`` holds, its spec one of ``specs``; None when it has another shape."""
        if type(data) is not dict or data.keys() != _DEVICE_KEYS:
            return None
        number, index, edits, annotations = data["spec"], data["index"], data["edits"], data["annotations"]
        if type(number) is not int or not 0 <= number < len(specs) or type(index) is not int:
            return None
        if type(edits) is not dict or type(annotations) is not dict:
            return None
        return cls(specs[number], index, edits, annotations)


_SPEC_KEYS = frozenset(("path", "kind", "edits"))
_DEVICE_KEYS = frozenset(("spec", "index", "edits", "annotations"))
_PROBLEM_KEYS = frozenset(("file", "field", "reason"))
_INDEX_KEYS = frozenset(("specs", "devices", "problems"))


def spec_dir_names(spec_dirs: Sequence[str]) -> tuple[str, ...]:
    """One spelling of each dir: the files and problems name "/etc/cdi/x.yaml" however it was given."""
    return tuple(os.path.normpath(directory) for directory in spec_dirs)


class SpecIndex:
    """The devices of ``dirs`` (in priority order: a later dir wins) as records: ``specs``, the spec
    files that loaded; ``devices``, each qualified name's device; ``problems``, what is wrong in the
    dirs (their devices left out). The edits are the index's own: trimming them changes the index, so
    use one for one container."""

    __slots__ = ("devices", "dirs", "problems", "specs")

    def __init__(
        self,
        dirs: tuple[str, ...],
        specs: list[SpecRecord],
        devices: dict[str, DeviceRecord],
        problems: list[Problem],
    ) -> None:
        self.dirs = dirs
        self.specs = specs
        self.devices = devices
        self.problems = problems

    @classmethod
    def load(
        cls,
        spec_dirs: Sequence[str],
        scan: ScanSpecs,
        store: ParseCache | None = None,
        *,
        require_dirs: bool = False,
        trusted_only: bool = True,
    ) -> SpecIndex:
        """The spec dirs as they are now: from ``store`` when the spec files are what its index was
        built from, else scanned with ``scan`` (the slow path:
        :attr:`cdictk.startpath.misses.Misses.scan_specs`) and the index stored.

        An index with ``require_dirs`` is not stored, its key being the files alone. The files skipped
        for trust are in the key (as problems), so a chown or chmod is seen at the next start like an
        edit. ``trusted_only``: skip the spec files someone other than root could change
        (:mod:`cdictk.startpath.specs.specdirs`); ``require_dirs``: a missing spec dir is a problem.
        """
        dirs = spec_dir_names(spec_dirs)
        key, stamp = _snapshot(dirs, trusted_only) if store is not None and not require_dirs else (None, [])
        if store is None or key is None:
            return cls.built(dirs, scan(dirs, require_dirs, trusted_only))
        from cdictk.startpath.specs.parsecache import entry_name  # noqa: PLC0415

        name = entry_name(ENTRY, "\0".join(dirs))
        index = cls.from_data(dirs, store.load(name, key))
        if index is not None:
            return index
        data = scan(dirs, require_dirs, trusted_only)
        if _snapshot(dirs, trusted_only) == (key, stamp):
            store.store(name, key, data)
        return cls.built(dirs, data)

    @classmethod
    def built(cls, dirs: tuple[str, ...], data: dict[str, Any]) -> SpecIndex:
        """The index of ``dirs`` a scan made, in its stored form (:mod:`cdictk.cdi.scan`)."""
        index = cls.from_data(dirs, data)
        if index is None:
            raise ValueError("a scan of the spec dirs made an index of another shape")
        return index

    def untrusted(self) -> list[Problem]:
        """The spec files and directories skipped because someone other than root could change them."""
        return [problem for problem in self.problems if untrusted(problem)]

    def has_kind(self, kind: str) -> bool:
        prefix = kind + "="
        return any(name.startswith(prefix) for name in self.devices)

    def resolve(self, requested: Sequence[str]) -> list[EditsSource]:
        """The edit blocks for ``requested`` in the reference library's order, all of them, or a
        CdictkError that names what is wrong: a name that is not a CDI name, or the names no spec
        defines (UnresolvedDevicesError). Each spec's own edits come once, before its first requested
        device, and a repeated device once."""
        for text in requested:
            try:
                parse_qualified_name(text)
            except ValueError as exc:
                raise CdictkError(text, "", str(exc)) from None
        devices = self.devices
        missing = [name for name in requested if name not in devices]
        if missing:
            raise UnresolvedDevicesError(list(dict.fromkeys(missing)), self._hint())
        sources: list[EditsSource] = []
        seen: set[int] = set()  # the specs whose own edits are in already
        for name in dict.fromkeys(requested):
            found = devices[name]
            spec = found.spec
            if id(spec) not in seen:
                seen.add(id(spec))
                sources.append(EditsSource(spec.edits, spec.path, "containerEdits"))
            sources.append(EditsSource(found.edits, spec.path, f"devices[{found.index}].containerEdits"))
        return sources

    def driver_sources(self, kind: str) -> list[EditsSource]:
        """The common edits of every spec of ``kind`` (``NVIDIA_VISIBLE_DEVICES=none``): no device."""
        return [
            EditsSource(spec.edits, spec.path, "containerEdits") for spec in self.specs if spec.kind == kind
        ]

    def with_spec_data(self, data: list[Any], path: str) -> SpecIndex:
        """A new index that also holds the spec ``data`` (made in memory; ``path`` names it) above every
        spec dir, in the form :func:`cdictk.cdi.scan.spec_data` gives (kept in the parse cache)."""
        kind, common, named = data
        record = SpecRecord(path, kind, common)
        devices = dict(self.devices)
        vendor, cls = split_kind(kind)
        for index, (name, edits) in enumerate(named):
            devices[f"{vendor}/{cls}={name}"] = DeviceRecord(record, index, edits, {})
        return SpecIndex(self.dirs, [*self.specs, record], devices, self.problems)

    @classmethod
    def from_data(cls, dirs: tuple[str, ...], data: Any) -> SpecIndex | None:
        """The index of ``dirs`` that ``data`` stores; None (a miss) when any part has another shape."""
        if type(data) is not dict or data.keys() != _INDEX_KEYS:
            return None
        stored_specs, stored_devices, stored_problems = data["specs"], data["devices"], data["problems"]
        if (
            type(stored_specs) is not list
            or type(stored_devices) is not dict
            or type(stored_problems) is not list
        ):
            return None
        specs: list[SpecRecord] = []
        for entry in stored_specs:
            spec = SpecRecord.from_data(entry)
            if spec is None:
                return None
            specs.append(spec)
        devices: dict[str, DeviceRecord] = {}
        for name, entry in stored_devices.items():
            device = DeviceRecord.from_data(entry, specs)
            if device is None:
                return None
            devices[name] = device
        problems: list[Problem] = []
        for entry in stored_problems:
            if type(entry) is not dict or entry.keys() != _PROBLEM_KEYS:
                return None
            file, field, reason = entry["file"], entry["field"], entry["reason"]
            if type(file) is not str or type(field) is not str or type(reason) is not str:
                return None
            problems.append(Problem(file, field, reason))
        return cls(dirs, specs, devices, problems)

    def _hint(self) -> str:
        problems = self.problems
        if problems:
            return f" ({len(problems)} problem(s) in the spec dirs, first: {problems[0]})"
        return f" (spec dirs: {', '.join(self.dirs)})"


def spec_key(dirs: Sequence[str], *, trusted_only: bool = True) -> list[Any] | None:
    """What the registry's result depends on: the spec files' text; None when one is not UTF-8."""
    return _snapshot(dirs, trusted_only)[0]


def _snapshot(dirs: Sequence[str], trusted_only: bool) -> tuple[list[Any] | None, list[Any]]:
    """The cache key (None: do not cache) and each spec file's inode, size, mtime and ctime."""
    key: list[Any] | None = [_FORMAT, __version__, _code_stamp()]
    stamp: list[Any] = []
    for directory in dirs:
        problems: list[Any] = []
        files: list[Any] = []
        # The mount table is looked at when the index is built; a mount made since changes a device.
        for path in spec_paths(directory, problems, trusted_only=trusted_only, mounts=None):
            text, stat_of = _read(path)
            stamp.append([path, stat_of])
            files.append([path, text, stat_of[0] if stat_of else None])
            if text is None:
                key = None
        if key is not None:
            key.append([directory, _device(directory), [str(problem) for problem in problems], files])
    return key, stamp


def _device(directory: str) -> int | None:
    try:
        return os.stat(directory).st_dev
    except OSError:
        return None


def _code_stamp() -> list[Any]:
    """The name, size and mtime of each module of the CDI core (cdictk/cdi, which parses and checks
    the specs, and this package, which names and applies them): they decide what the index holds."""
    found: list[Any] = [[__file__, *_size_mtime(__file__)]]
    for directory in CORE_DIRECTORIES:
        name = os.path.basename(directory)
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.endswith(".py"):
                        found.append([f"{name}/{entry.name}", *_size_mtime(entry.path)])
        except OSError as exc:
            found.append([f"{name}: cannot list", exc.errno])
    found.sort()
    return found


def _size_mtime(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [st.st_size, st.st_mtime_ns]


def _read(path: str) -> tuple[str | list[Any] | None, list[int]]:
    """The file's text (or what stops the loader from reading it; None: not UTF-8) and its stat."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return ["cannot open", exc.errno], []
    try:
        st = os.fstat(fd)
        stamp = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        if not stat.S_ISREG(st.st_mode):
            return ["not a regular file"], stamp
        data = read_fd(fd, MAX_SPEC_BYTES)
        if data is None:
            return ["too large"], stamp
    except OSError as exc:
        return ["cannot read", exc.errno], []
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8"), stamp
    except UnicodeDecodeError:
        return None, stamp
