"""The spec directories' devices: :class:`SpecDirs`, the one view of them every part of cdictk holds.

What a CDI-aware runtime would see in the spec dirs: every device by qualified name, loaded strictly
with the reference library's priority and conflict rules (:mod:`cdictk.cdi.registry`, the slow
builder: the YAML parser, the model, every rule), each with its edits and its spec's common edits in
the spec's JSON shape, which :func:`cdictk.startpath.specs.apply.apply_edits` reads, and the problems of the
dirs. ``cdictk cdi list/validate/inject``, the runtime shim, podman's precreate hook, the legacy prestart
hook and the library (``cdictk.api.SpecDirs``) all resolve CDI names here.

Its cached form is an index kept on disk (:mod:`cdictk.startpath.specs.parsecache`): loading it again is one
JSON read, so the runtime shim skips PyYAML and the model on every container start once the spec dirs have
been seen. The cache key is the text of every spec file (and what went wrong reading a directory or a
file), so any edit, a new file or a removed one rebuilds the index, and the size and mtime of the code
that builds it (the CDI core), so an upgrade does too. An index is only kept when no spec file changed
while it was built (their inode, size, mtime and ctime before and after): a file rewritten under the
loader, even with the same text in the end, would otherwise leave a torn read cached. A stored entry of
the wrong shape, down to one field of one record, is a miss.

Kept current, it is the library's consumer view: :meth:`SpecDirs.refresh` scans again, re-parsing only
the files that changed (:mod:`cdictk.cdi.rescan`), and with ``auto_refresh`` every call first asks
inotify whether a spec dir changed. Standard library only, no :mod:`typing` at import time.
"""

from __future__ import annotations

import os
import stat

from cdictk import __version__
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.helpers.fsutil import read_fd
from cdictk.startpath.specs.apply import EditsSource, apply_edits
from cdictk.startpath.specs.names import parse_qualified_name
from cdictk.startpath.specs.specdirs import DEFAULT_SPEC_DIRS, MAX_SPEC_BYTES, spec_paths, untrusted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from cdictk.cdi.model import Device, Spec
    from cdictk.cdi.registry import Registry
    from cdictk.cdi.rescan import Rescan
    from cdictk.startpath.specs.parsecache import ParseCache

    # the specs, the devices by qualified name, the problems: swapped as one by a scan
    State = tuple[list["SpecRecord"], dict[str, "DeviceRecord"], list[Problem]]

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


class ClosedError(CdictkError):
    def __init__(self) -> None:
        super().__init__("", "", "the spec dirs' view is closed")


class SpecRecord:
    """One spec file that loaded: its path, its kind and its own container edits (JSON shape)."""

    __slots__ = ("edits", "kind", "path")

    def __init__(self, path: str, kind: str, edits: dict[str, Any]) -> None:
        self.path = path
        self.kind = kind
        self.edits = edits

    def to_data(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "edits": self.edits}

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

    def to_data(self, spec_number: int) -> dict[str, Any]:
        """Stored with its spec as a number into the index's specs."""
        return {
            "spec": spec_number,
            "index": self.index,
            "edits": self.edits,
            "annotations": self.annotations,
        }

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


class SpecDirs:
    """The devices of ``spec_dirs`` (in priority order: a later dir wins), scanned now.

    ``auto_refresh``: every call first asks inotify whether a spec dir changed, and scans again if so;
    otherwise only :meth:`refresh` scans. ``trusted_only``: skip the spec files someone other than root
    could change (:mod:`cdictk.startpath.specs.specdirs`). ``require_dirs``: a spec dir that does not exist is
    a problem. :meth:`load` gives the same view from the stored index. Thread-safe: a scan replaces the
    whole state at once, under the lock of its :class:`~cdictk.cdi.rescan.Rescan`.
    """

    __slots__ = ("_closed", "_require_dirs", "_rescan", "_state", "dirs", "trusted_only")

    def __init__(
        self,
        spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS,
        auto_refresh: bool = True,
        *,
        trusted_only: bool = True,
        require_dirs: bool = False,
    ) -> None:
        from cdictk.cdi.rescan import Rescan  # noqa: PLC0415 - the slow path: a view kept current

        self._setup(spec_dirs, trusted_only, require_dirs)
        self._rescan: Rescan | None = Rescan(self.dirs, watch=auto_refresh)
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
        its index was built from, else scanned (and the index stored). What every command and the start
        path hold.

        A view with ``require_dirs`` is not stored, its key being the files alone. The files skipped for
        trust are in the key (as problems), so a chown or chmod is seen at the next start like an edit.
        """
        self = cls.__new__(cls)
        self._setup(spec_dirs, trusted_only, require_dirs)
        self._rescan = None
        dirs = self.dirs
        key, stamp = _snapshot(dirs, trusted_only) if store is not None and not require_dirs else (None, [])
        if store is None or key is None:
            self.refresh()
            return self
        from cdictk.startpath.specs.parsecache import entry_name  # noqa: PLC0415

        name = entry_name(ENTRY, "\0".join(dirs))
        state = _from_data(store.load(name, key))
        if state is not None:
            self._state = state
            return self
        self.refresh()
        if _snapshot(dirs, trusted_only) == (key, stamp):
            store.store(name, key, _to_data(self._state))
        return self

    def _setup(self, spec_dirs: Sequence[str], trusted_only: bool, require_dirs: bool) -> None:
        # One spelling of each dir: the files and problems name "/etc/cdi/x.yaml" however it was given.
        self.dirs = tuple(os.path.normpath(directory) for directory in spec_dirs)
        self.trusted_only = trusted_only
        self._require_dirs = require_dirs
        self._closed = False
        self._state: State = ([], {}, [])

    def refresh(self) -> None:
        """Scan the spec dirs now; a view kept current re-parses only the files that changed."""
        self._open()
        rescan = self._rescan
        if rescan is None:
            from cdictk.cdi.registry import load_registry  # noqa: PLC0415 - the slow path

            registry = load_registry(
                self.dirs, require_dirs=self._require_dirs, trusted_only=self.trusted_only
            )
            self._state = _state_of(registry)
            return
        with rescan.lock:
            self._rescanned(rescan)

    @property
    def reads(self) -> int:
        """The spec files parsed by this view's scans so far: what a change costs."""
        return 0 if self._rescan is None else self._rescan.reads

    def devices(self) -> list[str]:
        """The qualified names of every device a runtime would resolve, sorted."""
        return sorted(self._now()[1])

    def device(self, name: str) -> Device | None:
        """A copy of the device ``name`` (``vendor/class=name``) resolves to, or None."""
        found = self._now()[1].get(name)
        if found is None:
            return None
        from cdictk.cdi.decode import decode_spec  # noqa: PLC0415 - the model, for the library

        device: dict[str, Any] = {"name": name.partition("=")[2], "containerEdits": found.edits}
        if found.annotations:
            device["annotations"] = found.annotations
        return decode_spec({"kind": found.spec.kind, "devices": [device]}, found.spec.path).devices[0]

    def spec_file(self, name: str) -> str | None:
        """The file that defines device ``name``, or None."""
        found = self._now()[1].get(name)
        return None if found is None else found.spec.path

    def errors(self) -> list[Problem]:
        """What is wrong in the spec dirs: files that do not load, conflicts, dirs that cannot be read,
        files skipped for trust. Their devices are left out; every other device is there."""
        return list(self._now()[2])

    def untrusted(self) -> list[Problem]:
        """The spec files and directories skipped because someone other than root could change them."""
        return [problem for problem in self._now()[2] if untrusted(problem)]

    def has_kind(self, kind: str) -> bool:
        prefix = kind + "="
        return any(name.startswith(prefix) for name in self._now()[1])

    def resolve(self, requested: Sequence[str]) -> list[EditsSource]:
        """The edit blocks for ``requested`` in the reference library's order, all of them, or a
        CdictkError that names what is wrong: a name that is not a CDI name, or the names no spec
        defines (UnresolvedDevicesError). Each spec's own edits come once, before its first requested
        device, and a repeated device once.

        The edits are this view's own: trimming them changes the view, so use it for one container.
        """
        for text in requested:
            try:
                parse_qualified_name(text)
            except ValueError as exc:
                raise CdictkError(text, "", str(exc)) from None
        _, devices, problems = self._now()
        missing = [name for name in requested if name not in devices]
        if missing:
            raise UnresolvedDevicesError(list(dict.fromkeys(missing)), self._hint(problems))
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
            EditsSource(spec.edits, spec.path, "containerEdits")
            for spec in self._now()[0]
            if spec.kind == kind
        ]

    def apply_to(self, config: dict[str, Any], requested: Sequence[str], config_file: str) -> bool:
        """Apply the ``requested`` devices to the OCI ``config`` in place, all or none of them (False:
        it held them already): what ``cdictk cdi inject`` does. A host path that is no longer root's
        alone (:mod:`cdictk.startpath.specs.mountcheck`) refuses them all."""
        from cdictk.startpath.specs.mountcheck import check_host_paths  # noqa: PLC0415

        sources = self.resolve(requested)
        check_host_paths(sources)
        return apply_edits(config, sources, config_file)

    def inject(self, oci_config: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
        """A copy of ``oci_config`` with the devices ``names`` applied (:meth:`apply_to`); the input is
        never changed. All or nothing: UnresolvedDevicesError names the devices no spec defines."""
        import copy  # noqa: PLC0415 - the library's call; the start path applies in place

        config = copy.deepcopy(oci_config)
        self.apply_to(config, names, "<oci config>")
        return config

    def with_spec(self, spec: Spec, path: str) -> SpecDirs:
        """A view that also holds ``spec`` (made in memory; ``path`` names it), above every spec dir."""
        return self.with_spec_data(spec_data(spec), path)

    def with_spec_data(self, data: list[Any], path: str) -> SpecDirs:
        """The same for a spec in the form :func:`spec_data` gives (kept in the parse cache). The view
        returned is not kept current."""
        from cdictk.startpath.specs.names import split_kind  # noqa: PLC0415

        specs, devices, problems = self._now()
        kind, common, named = data
        record = SpecRecord(path, kind, common)
        devices = dict(devices)
        vendor, cls = split_kind(kind)
        for index, (name, edits) in enumerate(named):
            devices[f"{vendor}/{cls}={name}"] = DeviceRecord(record, index, edits, {})
        view = SpecDirs.__new__(SpecDirs)
        view._setup(self.dirs, self.trusted_only, self._require_dirs)
        view._rescan = None
        view._state = ([*specs, record], devices, problems)
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

    def _now(self) -> State:
        """The current state; first scanned again if the view is kept current and a dir changed."""
        self._open()
        rescan = self._rescan
        if rescan is not None and rescan.watching:
            with rescan.lock:
                if rescan.changed():
                    self._rescanned(rescan)
        return self._state

    def _rescanned(self, rescan: Rescan) -> None:
        registry = rescan.registry(require_dirs=self._require_dirs, trusted_only=self.trusted_only)
        self._state = _state_of(registry)

    def _hint(self, problems: list[Problem]) -> str:
        if problems:
            return f" ({len(problems)} problem(s) in the spec dirs, first: {problems[0]})"
        return f" (spec dirs: {', '.join(self.dirs)})"


def _state_of(registry: Registry) -> State:
    """The registry's devices, their specs' common edits and its problems as records."""
    from cdictk.cdi.dump import to_data  # noqa: PLC0415 - only when the index is (re)built

    records: dict[int, SpecRecord] = {}
    specs: list[SpecRecord] = []
    for spec_file in registry.spec_files:
        record = SpecRecord(spec_file.path, spec_file.spec.kind, to_data(spec_file.spec.container_edits))
        records[id(spec_file)] = record
        specs.append(record)
    devices = {
        name: DeviceRecord(
            records[id(found.spec_file)],
            found.index,
            to_data(found.device.container_edits),
            dict(found.device.annotations),
        )
        for name, found in registry.devices.items()
    }
    return specs, devices, list(registry.problems)


def _to_data(state: State) -> dict[str, Any]:
    """The index as it is stored: named fields, a device's spec as a number into the specs."""
    specs, devices, problems = state
    numbers = {id(spec): number for number, spec in enumerate(specs)}
    return {
        "specs": [spec.to_data() for spec in specs],
        "devices": {name: found.to_data(numbers[id(found.spec)]) for name, found in devices.items()},
        "problems": [{"file": p.file, "field": p.field, "reason": p.reason} for p in problems],
    }


def _from_data(data: Any) -> State | None:
    """The index ``data`` stores; None (a miss) when any part of it has another shape."""
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
    return specs, devices, problems


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
        for path in spec_paths(directory, problems, trusted_only=trusted_only, filesystems=False):
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


def spec_data(spec: Spec) -> list[Any]:
    """``[kind, common edits, [[device name, edits], ...]]`` as plain data: what the cache holds of a
    spec, and what :meth:`SpecDirs.with_spec_data` takes."""
    from cdictk.cdi.dump import to_data  # noqa: PLC0415 - the model is there already

    return [
        spec.kind,
        to_data(spec.container_edits),
        [[d.name, to_data(d.container_edits)] for d in spec.devices],
    ]
