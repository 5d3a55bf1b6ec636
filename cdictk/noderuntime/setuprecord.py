"""What ``cdictk system install`` did outside the runtime, kept in ``PREFIX/.setup.json`` for
``cdictk system uninstall``: the directories it made, the files it wrote (with the SHA-256 of what it
wrote: a file changed since is left), the links it made, the units it enabled and the engines it
registered the shim with. Saved after every step, so that an install stopped halfway can still be
undone. The file is root's, in a root-only prefix; it is read strictly all the same (capped, one
shape, no duplicate keys), and anything else in it is one line and no change."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from cdictk.noderuntime.install import InstallError
from cdictk.startpath.helpers import strictjson
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, read_capped

RECORD = ".setup.json"
_MAX_BYTES = 1 << 20
_VERSION = 1
_ENGINE_KEYS = frozenset({"engine", "config", "restart"})


@dataclass(frozen=True, slots=True)
class Registered:
    """An engine whose config the install changed, and how it is restarted after a change."""

    engine: str
    config: str
    restart: str


@dataclass(slots=True)
class Record:
    made: list[str] = field(default_factory=list)  # directories, each after the one above it
    files: dict[str, str] = field(default_factory=dict)  # path -> SHA-256 of what was written
    links: dict[str, str] = field(default_factory=dict)  # path -> the target it was made with
    units: list[str] = field(default_factory=list)  # systemd units enabled
    engines: list[Registered] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.made or self.files or self.links or self.units or self.engines)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def path_of(prefix_here: str) -> str:
    return os.path.join(prefix_here, RECORD)


def load(prefix_here: str) -> Record:
    """The record under the prefix as this process sees it; an empty one when there is none."""
    path = path_of(prefix_here)
    if not os.path.lexists(path):
        return Record()
    try:
        data = strictjson.loads(read_capped(path, _MAX_BYTES), path)
        return _parse(data)
    except (CdictkError, TypeError, ValueError, KeyError) as exc:
        raise InstallError(f"{path}: not a record `cdictk system install` wrote ({exc})") from None


def _parse(data: object) -> Record:
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        raise ValueError(f"want an object with version {_VERSION}")
    if set(data) != {"version", "made", "files", "links", "units", "engines"}:
        raise ValueError(f"keys {sorted(data)}")
    record = Record(
        made=_strings(data["made"]),
        files=_string_map(data["files"]),
        links=_string_map(data["links"]),
        units=_strings(data["units"]),
    )
    for item in data["engines"]:
        if not isinstance(item, dict) or set(item) != _ENGINE_KEYS:
            raise ValueError(f"engines: want objects of {', '.join(sorted(_ENGINE_KEYS))}")
        record.engines.append(Registered(**{key: _string(item[key]) for key in _ENGINE_KEYS}))
    for path in [*record.made, *record.files, *record.links, *(item.config for item in record.engines)]:
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            raise ValueError(f"{path!r} is not an absolute, normalised path")
    return record


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _strings(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return [_string(item) for item in value]


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError(f"{value!r} is not an object")
    return {_string(key): _string(item) for key, item in value.items()}


def save(prefix_here: str, record: Record) -> None:
    """Written atomically; removed once there is nothing in it."""
    path = path_of(prefix_here)
    if record.empty():
        if os.path.lexists(path):
            os.unlink(path)
        return
    document = {
        "version": _VERSION,
        "made": record.made,
        "files": record.files,
        "links": record.links,
        "units": record.units,
        "engines": [
            {"engine": item.engine, "config": item.config, "restart": item.restart} for item in record.engines
        ],
    }
    text = json.dumps(document, indent=2) + "\n"  # for the operator who reads it too
    atomic_write(path, text.encode(), mode=0o644, keep_mode=False)
