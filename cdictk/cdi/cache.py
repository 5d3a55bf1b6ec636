"""The devices of the spec dirs as the runtime shim applies them: plain data, kept between starts.

Building the index loads the spec dirs with the CDI core (the YAML parser, the model, every rule of
the reference library), so it holds exactly the devices the registry resolves, each with its edits
and its spec's common edits in the spec's JSON shape, which :func:`cdictk.cdi.apply.apply_edits`
reads. Loading it again is one JSON read: the runtime shim skips PyYAML and the model on every
container start once the spec dirs have been seen (:mod:`cdictk.runtime.cache`).

The cache key is the text of every spec file (and what went wrong reading a directory or a file),
so any edit, a new file or a removed one rebuilds the index, and the size and mtime of the code that
builds it (the CDI core), so an upgrade does too. An index is only kept when no spec file changed
while it was built (their inode, size, mtime and ctime before and after): a file rewritten under the
loader, even with the same text in the end, would otherwise leave a torn read cached. A cached entry
of the wrong shape is a miss. A name the index does not hold is not an error here: the caller asks
the registry, whose message says why. Standard library only.
"""

from __future__ import annotations

import os
import stat

from cdictk import __version__
from cdictk.cdi.apply import EditsSource
from cdictk.cdi.specdirs import MAX_SPEC_BYTES, spec_paths
from cdictk.fsutil import read_fd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from cdictk.cdi.registry import Registry
    from cdictk.runtime.cache import Cache

ENTRY = "spec-index"
_FORMAT = 2


class SpecIndex:
    """``specs``: [path, common edits, kind] per spec file; ``devices``: name -> [spec, index, edits]."""

    __slots__ = ("devices", "specs")

    def __init__(self, data: dict[str, Any]) -> None:
        self.specs: list[list[Any]] = data["specs"]
        self.devices: dict[str, list[Any]] = data["devices"]

    def has_kind(self, kind: str) -> bool:
        prefix = kind + "="
        return any(name.startswith(prefix) for name in self.devices)

    def driver_sources(self, kind: str) -> list[EditsSource]:
        """The common edits of every spec of ``kind`` (``NVIDIA_VISIBLE_DEVICES=none``): no device."""
        return [EditsSource(common, path, "containerEdits") for path, common, of in self.specs if of == kind]

    def sources(self, requested: Sequence[str]) -> list[EditsSource] | None:
        """The edit blocks for ``requested``, ordered as ``edits_for`` orders them; None if one is unknown.

        The edits are this index's own: trimming them changes the index, so use it for one container.
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


def index_data(registry: Registry) -> dict[str, Any]:
    """The registry's devices and their specs' common edits as plain data."""
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
    return {"specs": specs, "devices": devices}


def load_index(dirs: Sequence[str], cache: Cache) -> SpecIndex:
    """The index of ``dirs``: from the cache when the spec files are what it was built from."""
    from cdictk.runtime.cache import entry_name  # noqa: PLC0415

    key, stamp = _snapshot(dirs)
    name = entry_name(ENTRY, "\0".join(dirs))
    if key is not None:
        data = cache.load(name, key)
        if _well_formed(data):
            return SpecIndex(data)
    from cdictk.cdi.registry import load_registry  # noqa: PLC0415 - the slow path

    data = index_data(load_registry(dirs))
    if key is not None and _snapshot(dirs) == (key, stamp):  # nothing changed while loading
        cache.store(name, key, data)
    return SpecIndex(data)


def spec_key(dirs: Sequence[str]) -> list[Any] | None:
    """What the registry's result depends on: the spec files' text; None when one is not UTF-8."""
    return _snapshot(dirs)[0]


def _snapshot(dirs: Sequence[str]) -> tuple[list[Any] | None, list[Any]]:
    """The cache key (None: do not cache) and each spec file's inode, size, mtime and ctime."""
    key: list[Any] | None = [_FORMAT, __version__, _code_stamp()]
    stamp: list[Any] = []
    for directory in dirs:
        problems: list[Any] = []
        files: list[Any] = []
        for path in spec_paths(directory, problems):
            text, stat_of = _read(path)
            stamp.append([path, stat_of])
            files.append([path, text])
            if text is None:
                key = None
        if key is not None:
            key.append([directory, [str(problem) for problem in problems], files])
    return key, stamp


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
    if not isinstance(specs, list) or not isinstance(devices, dict):
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
