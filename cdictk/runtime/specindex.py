"""The devices of the spec dirs as the runtime shim applies them: plain data, kept between starts.

Building the index loads the spec dirs with the CDI core (the YAML parser, the model, every rule of
the reference library), so it holds exactly the devices the registry resolves, each with its edits
and its spec's common edits in the spec's JSON shape, which :func:`cdictk.cdi.apply.apply_edits`
reads. Loading it again is one JSON read: the runtime shim skips PyYAML and the model on every
container start once the spec dirs have been seen (:mod:`cdictk.runtime.cache`).

The cache key is the text of every spec file (and what went wrong reading a directory or a file),
so any edit, a new file or a removed one rebuilds the index. A name the index does not hold is not
an error here: the caller asks the registry, whose message says why. Standard library only.
"""

from __future__ import annotations

import os
import stat

from cdictk import __version__
from cdictk.cdi.apply import EditsSource
from cdictk.cdi.specdirs import MAX_SPEC_BYTES, spec_paths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from cdictk.cdi.registry import Registry
    from cdictk.runtime.cache import Cache

ENTRY = "spec-index"
_FORMAT = 1


class SpecIndex:
    """``specs``: [path, common edits] per spec file; ``devices``: name -> [spec, index in it, edits]."""

    __slots__ = ("devices", "specs")

    def __init__(self, data: dict[str, Any]) -> None:
        self.specs: list[list[Any]] = data["specs"]
        self.devices: dict[str, list[Any]] = data["devices"]

    def has_kind(self, kind: str) -> bool:
        prefix = kind + "="
        return any(name.startswith(prefix) for name in self.devices)

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
            path, common = self.specs[number]
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
        specs.append([spec_file.path, to_data(spec_file.spec.container_edits)])
    devices = {
        name: [numbers[id(found.spec_file)], found.index, to_data(found.device.container_edits)]
        for name, found in registry.devices.items()
    }
    return {"specs": specs, "devices": devices}


def load_index(dirs: Sequence[str], cache: Cache) -> SpecIndex:
    """The index of ``dirs``: from the cache when the spec files are what it was built from."""
    from cdictk.runtime.cache import entry_name  # noqa: PLC0415

    key = spec_key(dirs)
    name = entry_name(ENTRY, "\0".join(dirs))
    data = cache.load(name, key) if key is not None else None
    if data is None:
        from cdictk.cdi.registry import load_registry  # noqa: PLC0415 - the slow path

        data = index_data(load_registry(dirs))
        if key is not None and spec_key(dirs) == key:  # kept only if nothing changed while loading
            cache.store(name, key, data)
    return SpecIndex(data)


def spec_key(dirs: Sequence[str]) -> list[Any] | None:
    """What the registry's result depends on: each spec file's text; None when one is not UTF-8."""
    key: list[Any] = [_FORMAT, __version__]
    for directory in dirs:
        problems: list[Any] = []
        files: list[Any] = []
        for path in spec_paths(directory, problems):
            text = _read(path)
            if text is None:
                return None
            files.append([path, text])
        key.append([directory, [str(problem) for problem in problems], files])
    return key


def _read(path: str) -> str | list[Any] | None:
    """The file's text, or what stops the loader from reading it; None: not UTF-8 (no caching)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return ["cannot open", exc.errno]
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ["not a regular file"]
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_SPEC_BYTES:
                return ["too large"]
    except OSError as exc:
        return ["cannot read", exc.errno]
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        return None
