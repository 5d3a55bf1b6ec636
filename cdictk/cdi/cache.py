"""Start path: standard library only.

The spec cache: the devices of the spec dirs, resolved and applied the one way cdictk knows.

``cdictk cdi inject``, the runtime shim, podman's precreate hook and the legacy prestart hook all
resolve CDI names here. Building it loads the spec dirs with the registry (the YAML parser, the
model, every rule of the reference library), so it holds exactly the devices the registry holds, each
with its edits and its spec's common edits in the spec's JSON shape, which
:func:`cdictk.cdi.apply.apply_edits` reads, and the registry's problems. Kept on disk
(:mod:`cdictk.parsecache`), loading it again is one JSON read: the runtime shim skips PyYAML and the
model on every container start once the spec dirs have been seen.

The cache key is the text of every spec file (and what went wrong reading a directory or a file),
so any edit, a new file or a removed one rebuilds the index, and the size and mtime of the code that
builds it (the CDI core), so an upgrade does too. An index is only kept when no spec file changed
while it was built (their inode, size, mtime and ctime before and after): a file rewritten under the
loader, even with the same text in the end, would otherwise leave a torn read cached. A cached entry
of the wrong shape is a miss. Standard library only.
"""

from __future__ import annotations

import os
import stat

from cdictk import __version__
from cdictk.cdi.apply import EditsSource, apply_edits
from cdictk.cdi.names import parse_qualified_name
from cdictk.cdi.specdirs import MAX_SPEC_BYTES, spec_paths, untrusted
from cdictk.errors import CdictkError, Problem
from cdictk.fsutil import read_fd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from cdictk.cdi.model import Spec
    from cdictk.cdi.registry import Registry
    from cdictk.parsecache import ParseCache

ENTRY = "spec-index"
_FORMAT = 4


class UnresolvedDevicesError(CdictkError):
    def __init__(self, names: Sequence[str], hint: str) -> None:
        plural = "s" if len(names) > 1 else ""
        super().__init__(", ".join(names), "", f"unresolvable CDI device{plural}{hint}")
        self.names = list(names)


class SpecCache:
    """``specs``: [path, common edits, kind] per spec file; ``devices``: name -> [spec, index, edits];
    ``problems``: [file, field, reason] the registry found; ``dirs``: the spec dirs, in priority order."""

    __slots__ = ("devices", "dirs", "problems", "specs")

    def __init__(self, data: dict[str, Any]) -> None:
        self.specs: list[list[Any]] = data["specs"]
        self.devices: dict[str, list[Any]] = data["devices"]
        self.problems: list[list[str]] = data["problems"]
        self.dirs: list[str] = data["dirs"]

    def device_names(self) -> list[str]:
        return sorted(self.devices)

    def spec_of(self, name: str) -> str:
        """The file that defines device ``name``."""
        return str(self.specs[self.devices[name][0]][0])

    def problem_list(self) -> list[Problem]:
        return [Problem(*problem) for problem in self.problems]

    def untrusted(self) -> list[Problem]:
        """The spec files and directories skipped because someone other than root could change them."""
        return [problem for problem in self.problem_list() if untrusted(problem)]

    def resolve(self, requested: Sequence[str]) -> list[EditsSource]:
        """The edit blocks for ``requested``, all of them, or a CdictkError that names what is wrong:
        a name that is not a CDI name, or the names no spec defines (UnresolvedDevicesError)."""
        for text in requested:
            try:
                parse_qualified_name(text)
            except ValueError as exc:
                raise CdictkError(text, "", str(exc)) from None
        sources = self.sources(requested)
        if sources is None:
            missing = [name for name in requested if name not in self.devices]
            raise UnresolvedDevicesError(list(dict.fromkeys(missing)), self._hint())
        return sources

    def inject(self, config: dict[str, Any], requested: Sequence[str], config_file: str) -> None:
        """Apply the ``requested`` devices to the OCI ``config`` in place, all or none of them: what
        ``cdictk cdi inject`` and the library's :meth:`cdictk.api.SpecCache.inject` do. A host path that
        is no longer root's alone (:mod:`cdictk.cdi.mountcheck`) refuses them all."""
        from cdictk.cdi.mountcheck import check_host_paths  # noqa: PLC0415

        sources = self.resolve(requested)
        check_host_paths(sources)
        apply_edits(config, sources, config_file)

    def _hint(self) -> str:
        if self.problems:
            first = Problem(*self.problems[0])
            return f" ({len(self.problems)} problem(s) in the spec dirs, first: {first})"
        return f" (spec dirs: {', '.join(self.dirs)})"

    def with_spec(self, spec: Spec, path: str) -> SpecCache:
        """A cache that also holds ``spec`` (made in memory; ``path`` names it), above every spec dir."""
        return self.with_spec_data(spec_data(spec), path)

    def with_spec_data(self, data: list[Any], path: str) -> SpecCache:
        """The same for a spec in the form :func:`spec_data` gives (kept in the parse cache)."""
        from cdictk.cdi.names import split_kind  # noqa: PLC0415

        kind, common, named = data
        number = len(self.specs)
        specs = [*self.specs, [path, common, kind]]
        devices = dict(self.devices)
        vendor, cls = split_kind(kind)
        for index, (name, edits) in enumerate(named):
            devices[f"{vendor}/{cls}={name}"] = [number, index, edits]
        return SpecCache({"specs": specs, "devices": devices, "problems": self.problems, "dirs": self.dirs})

    def has_kind(self, kind: str) -> bool:
        prefix = kind + "="
        return any(name.startswith(prefix) for name in self.devices)

    def driver_sources(self, kind: str) -> list[EditsSource]:
        """The common edits of every spec of ``kind`` (``NVIDIA_VISIBLE_DEVICES=none``): no device."""
        return [EditsSource(common, path, "containerEdits") for path, common, of in self.specs if of == kind]

    def sources(self, requested: Sequence[str]) -> list[EditsSource] | None:
        """The edit blocks for ``requested`` in the reference library's order: each spec's own edits
        once, before its first requested device, and a repeated device once. None if one is unknown.

        The edits are this cache's own: trimming them changes the cache, so use it for one container.
        """
        sources: list[EditsSource] = []
        seen_specs: set[int] = set()
        seen: set[str] = set()
        for name in requested:
            entry = self.devices.get(name)
            if entry is None:
                return None
            if name in seen:
                continue
            seen.add(name)
            number, index, edits = entry
            path, common, _ = self.specs[number]
            if number not in seen_specs:
                seen_specs.add(number)
                sources.append(EditsSource(common, path, "containerEdits"))
            sources.append(EditsSource(edits, path, f"devices[{index}].containerEdits"))
        return sources


def cache_data(registry: Registry) -> dict[str, Any]:
    """The registry's devices, their specs' common edits and its problems as plain data."""
    from cdictk.cdi.dump import to_data  # noqa: PLC0415 - only when the index is (re)built

    numbers: dict[int, int] = {}
    specs: list[list[Any]] = []
    for spec_file in registry.spec_files:
        numbers[id(spec_file)] = len(specs)
        specs.append([spec_file.path, to_data(spec_file.spec.container_edits), spec_file.spec.kind])
    devices = {
        name: [numbers[id(found.spec_file)], found.index, to_data(found.device.container_edits)]
        for name, found in registry.devices.items()
    }
    problems = [[problem.file, problem.field, problem.reason] for problem in registry.problems]
    return {"specs": specs, "devices": devices, "problems": problems, "dirs": list(registry.dirs)}


def load_specs(
    dirs: Sequence[str],
    store: ParseCache | None = None,
    *,
    require_dirs: bool = False,
    trusted_only: bool = True,
) -> SpecCache:
    """The spec cache of ``dirs``: from ``store`` when the spec files are what it was built from.

    ``require_dirs``: a spec dir that cannot be read is a problem (what ``--spec-dir`` asks for); such a
    cache is not stored, its key being the files alone. ``trusted_only``: see
    :mod:`cdictk.cdi.specdirs`; the files skipped are in the key (as problems), so a chown or chmod
    is seen at the next start like an edit.
    """
    from cdictk.parsecache import entry_name  # noqa: PLC0415

    key, stamp = _snapshot(dirs, trusted_only) if store is not None and not require_dirs else (None, [])
    name = entry_name(ENTRY, "\0".join(dirs))
    if store is not None and key is not None:
        data = store.load(name, key)
        if _well_formed(data):
            return SpecCache(data)
    from cdictk.cdi.registry import load_registry  # noqa: PLC0415 - the slow path

    data = cache_data(load_registry(dirs, require_dirs=require_dirs, trusted_only=trusted_only))
    if store is not None and key is not None and _snapshot(dirs, trusted_only) == (key, stamp):
        store.store(name, key, data)
    return SpecCache(data)


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
    """The name, size and mtime of each module of the CDI core, which decides what the index holds."""
    import cdictk.cdi  # noqa: PLC0415 - imported already, by cdictk.cdi.apply

    directory = os.path.dirname(os.path.abspath(cdictk.cdi.__file__))
    found: list[Any] = [[__file__, *_size_mtime(__file__)]]
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".py"):
                    found.append([entry.name, *_size_mtime(entry.path)])
    except OSError as exc:
        found.append(["cannot list", exc.errno])
    found.sort()
    return found


def _size_mtime(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [st.st_size, st.st_mtime_ns]


def _well_formed(data: Any) -> bool:
    """Whether a cached value has the index's shape, down to the numbers that point into it."""
    if not isinstance(data, dict):
        return False
    specs, devices = data.get("specs"), data.get("devices")
    problems, dirs = data.get("problems"), data.get("dirs")
    if not isinstance(specs, list) or not isinstance(devices, dict):
        return False
    if not isinstance(dirs, list) or not all(isinstance(directory, str) for directory in dirs):
        return False
    if not isinstance(problems, list) or not all(
        isinstance(problem, list) and len(problem) == 3 and all(isinstance(part, str) for part in problem)
        for problem in problems
    ):
        return False
    for spec in specs:
        if not (
            isinstance(spec, list)
            and len(spec) == 3
            and isinstance(spec[0], str)
            and isinstance(spec[1], dict)
            and isinstance(spec[2], str)
        ):
            return False
    for entry in devices.values():
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and type(entry[0]) is int
            and 0 <= entry[0] < len(specs)
            and type(entry[1]) is int
            and isinstance(entry[2], dict)
        ):
            return False
    return True


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
    spec, and what :meth:`SpecCache.with_spec_data` takes."""
    from cdictk.cdi.dump import to_data  # noqa: PLC0415 - the model is there already

    return [
        spec.kind,
        to_data(spec.container_edits),
        [[d.name, to_data(d.container_edits)] for d in spec.devices],
    ]
