"""CRI-O: a ``[crio.runtime.runtimes.<name>]`` entry, by default in its own drop-in file.

CRI-O merges drop-ins key by key, so the drop-in holds only our entries; ``monitor_path`` and the other
settings of the default (else runc, else crun) runtime are copied so that the new runtime is monitored
the way the node's runtimes are. CRI-O has CDI on by default: there is nothing to enable. ``plan`` and
``inspect`` are what the engine's record (:mod:`cdictk.configure.engines`) calls.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import tomlkit

from cdictk.configure import tomledit, writer
from cdictk.configure.change import Edit, Inspection, Plan, RuntimeChange, describe, shim_paths
from cdictk.configure.containerd import before, check_change, parse_all, table, walk
from cdictk.startpath.helpers.errors import CdictkError

# Settings that describe how to run an OCI runtime; anything else in a runtime's table is its own.
_COPIED = (
    "monitor_path",
    "monitor_cgroup",
    "monitor_env",
    "monitor_exec_cgroup",
    "runtime_root",
    "runtime_config_path",
)


def _runtime_section(data: dict[str, Any], file: str) -> dict[str, Any]:
    crio = data.get("crio", {})
    runtime = crio.get("runtime", {}) if isinstance(crio, dict) else None
    if not isinstance(runtime, dict):
        raise CdictkError(file, "crio.runtime", "is not a table")
    return runtime


def entry(
    source: dict[str, Any], change: RuntimeChange, file: str, existing: object = None
) -> dict[str, Any]:
    """Our entry: the existing one when there is one (so a re-run changes nothing), else the default
    (else runc, else crun) runtime's monitor settings; either way running our binary."""
    if isinstance(existing, dict):
        return {**copy.deepcopy(existing), "runtime_path": change.runtime_path, "runtime_type": "oci"}
    runtime = _runtime_section(source, file)
    runtimes = runtime.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise CdictkError(file, "crio.runtime.runtimes", "is not a table")
    new: dict[str, Any] = {"runtime_path": change.runtime_path, "runtime_type": "oci"}
    for name in (runtime.get("default_runtime"), "runc", "crun"):
        if isinstance(name, str) and name != change.runtime_name and isinstance(runtimes.get(name), dict):
            new |= {key: copy.deepcopy(runtimes[name][key]) for key in _COPIED if key in runtimes[name]}
            break
    return new


def changed(
    data: dict[str, Any],
    source: dict[str, Any],
    change: RuntimeChange,
    file: str,
    before: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``data`` (the file being written) after the change; ``source`` is the config to copy settings from."""
    new = copy.deepcopy(data)
    crio = table(new, "crio", file, "")
    runtime = table(crio, "runtime", file, "crio")
    runtimes = table(runtime, "runtimes", file, "crio.runtime")
    if change.remove:
        runtimes.pop(change.runtime_name, None)
        if runtime.get("default_runtime") == change.runtime_name:
            old = (((before or {}).get("crio") or {}).get("runtime") or {}).get("default_runtime")
            if isinstance(old, str) and old != change.runtime_name:
                runtime["default_runtime"] = old  # the one configure replaced (in place, from the backup)
            else:
                del runtime["default_runtime"]
        for path in (["crio", "runtime", "runtimes"], ["crio", "runtime"], ["crio"]):
            parent = new
            for key in path[:-1]:
                parent = parent[key]
            if parent.get(path[-1]) == {}:
                del parent[path[-1]]
        return new
    runtimes[change.runtime_name] = entry(source, change, file, runtimes.get(change.runtime_name))
    if change.set_as_default:
        runtime["default_runtime"] = change.runtime_name
    return new


def plan(main: writer.Current, drop_in: writer.Current | None, change: RuntimeChange) -> Plan:
    if drop_in is None:
        edit = configure(main.text or "", main.path, None, main.path, change, before=before(main.path))
        return Plan(((main, edit),))
    edit = configure(drop_in.text or "", drop_in.path, main.text, main.path, change)
    return Plan(((drop_in, edit),), own=frozenset({drop_in.path}))


def inspect(files: Sequence[tuple[str, str]]) -> Inspection:
    """The runtimes whose ``runtime_path`` is cdictk-runtime; CDI is always on."""
    parsed, problem = parse_all(files)
    found = shim_paths(value for data in parsed for key, value in walk(data) if key == "runtime_path")
    return Inspection(True, found, describe(True, found), problem)


def configure(
    text: str,
    file: str,
    source_text: str | None,
    source_file: str,
    change: RuntimeChange,
    *,
    before: dict[str, Any] | None = None,
) -> Edit:
    """``file`` (a drop-in, or the main config itself) after the change; settings are copied from the
    main config ``source_text`` (the same text when editing in place)."""
    check_change(change, file)
    document, data = tomledit.load(text, file)
    source = data if source_text is None else _settings(source_text, source_file)
    intended = changed(data, source, change, file, before)
    if intended == data:
        return Edit(file, text)
    if change.remove and not intended and text.lstrip().startswith(HEADER):
        return Edit(file, None)  # our own drop-in, now empty
    if not data and not text.strip():
        return Edit(file, HEADER + tomledit.edit(tomlkit.document(), {}, intended, file))
    return Edit(file, tomledit.edit(document, data, intended, file, like=text))


def _settings(text: str, file: str) -> dict[str, Any]:
    """The main config's settings, when only the drop-in is edited: read, never edited, so a layout of
    valid TOML that tomlkit cannot read is no reason to refuse."""
    return tomledit.read(text, file)


HEADER = "# Written by `cdictk runtime configure`.\n"
