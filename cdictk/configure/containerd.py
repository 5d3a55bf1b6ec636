"""containerd: register the cdictk runtime in the CRI plugin, make it the default, turn on CDI.

Config versions: 1 (containerd 1.x, plugin ``cri``), 2 (1.x, ``io.containerd.grpc.v1.cri``), 3 (2.x,
``io.containerd.cri.v1.runtime``); a file without ``version`` is 1, a missing or empty one takes the
version of the installed containerd (2 when there is none).

Drop-in mode (versions 2 and 3, the default) writes the runtime into its own file and appends that file
to the main config's ``imports``. containerd 1.6 merges an import by replacing whole plugin tables, so
the drop-in carries a copy of the main file's entire CRI plugin table: a drop-in with the new runtime
alone would make the daemon lose ``sandbox_image``, runc's ``SystemdCgroup`` and the rest. Re-run
configure after editing that table in the main file. And once a config names any runtime, containerd
1.6 no longer provides its built-in ``runc``: a config written from an empty one names runc too.

``plan`` and ``inspect`` are what the engine's record (:mod:`cdictk.configure.engines`) calls;
CRI-O's module shares the TOML helpers here.
"""

from __future__ import annotations

import copy
import glob
import os
import re
import subprocess
import tomllib
from collections.abc import Sequence
from typing import Any

import tomlkit

from cdictk.configure import tomledit, writer
from cdictk.configure.change import Edit, Inspection, Plan, RuntimeChange, describe, shim_paths
from cdictk.startpath.helpers.errors import CdictkError

CRI_PLUGINS = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_V2 = "io.containerd.runc.v2"
DEFAULT_CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
DROP_IN_HEADER = "# Written by `cdictk runtime configure`"
CDI_ANNOTATIONS = "cdi.k8s.io/*"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def installed_version(binary: str = "containerd") -> int | None:
    """The config version the installed containerd writes: 3 for 2.x, 2 for 1.x; None without one."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\sv?(\d+)\.\d+", out)
    if match is None:
        return None
    return 3 if int(match.group(1)) >= 2 else 2


def config_version(data: dict[str, Any], file: str, installed: int | None) -> int:
    if not data:
        return installed or 2
    version = data.get("version", 1)
    if version not in CRI_PLUGINS or isinstance(version, bool):
        raise CdictkError(file, "version", f"unsupported config version {version!r} (1, 2 or 3)")
    return int(version)


def table(parent: dict[str, Any], key: str, file: str, where: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        shown = f'"{key}"' if "." in key else key
        raise CdictkError(file, f"{where}.{shown}" if where else shown, "is not a table")
    return value


def _peek(parent: Any, *keys: str) -> Any:
    """``parent[k1][k2]...`` or None, for reading data that may not have the shape we want."""
    for key in keys:
        if not isinstance(parent, dict):
            return None
        parent = parent.get(key)
    return parent


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def check_change(change: RuntimeChange, file: str) -> None:
    name = change.runtime_name
    if not _NAME.fullmatch(name) or name == "runc":
        raise CdictkError(
            file,
            "--runtime-name",
            f"{name!r} is not a usable runtime name (letters, digits, - _ .; not runc)",
        )
    for directory in change.cdi_spec_dirs:
        if not directory.startswith("/"):
            raise CdictkError(file, "--cdi-spec-dir", f"must be an absolute path, not {directory!r}")


def change_cri(
    cri: dict[str, Any], change: RuntimeChange, file: str, where: str, before: dict[str, Any]
) -> dict[str, Any]:
    """The CRI plugin table ``cri`` after the change.

    ``before`` is the table as it was without cdictk: --remove puts back what configure replaced there
    (a previous default runtime, CDI settings) and keeps what was already there.
    """
    new = copy.deepcopy(cri)
    section = table(new, "containerd", file, where)
    runtimes = table(section, "runtimes", file, f"{where}.containerd")
    before_section = _peek(before, "containerd") or {}
    before_runtimes = _peek(before_section, "runtimes") or {}
    name = change.runtime_name
    if change.remove:
        runtimes.pop(name, None)
        if runtimes == {"runc": {"runtime_type": RUNC_V2}} and "runc" not in before_runtimes:
            del runtimes["runc"]  # configure added it to a config that named no runtime
        if section.get("default_runtime_name") == name:
            _restore(section, "default_runtime_name", before_section, unless=name)
        if change.enable_cdi:
            _restore(new, "enable_cdi", before)
        if change.cdi_spec_dirs or (
            change.enable_cdi and new.get("cdi_spec_dirs") == list(DEFAULT_CDI_SPEC_DIRS)
        ):
            _restore(new, "cdi_spec_dirs", before)
        if not runtimes and "runtimes" not in before_section:
            del section["runtimes"]
        if not section and "containerd" not in before:
            del new["containerd"]
        return new
    if not runtimes:
        runtimes["runc"] = {"runtime_type": RUNC_V2}
    runtimes[name] = _runtime_table(section, runtimes, change, file)
    if change.set_as_default:
        section["default_runtime_name"] = name
    if change.enable_cdi:
        new["enable_cdi"] = True
        # Spelled out even when they are containerd's defaults, so the file says where specs are read.
        new.setdefault("cdi_spec_dirs", list(DEFAULT_CDI_SPEC_DIRS))
    if change.cdi_spec_dirs:
        new["cdi_spec_dirs"] = list(change.cdi_spec_dirs)
    return new


def _restore(table: dict[str, Any], key: str, before: Any, unless: object = None) -> None:
    old = _peek(before, key)
    if old is not None and old != unless:
        table[key] = copy.deepcopy(old)
    else:
        table.pop(key, None)


def changed(
    data: dict[str, Any], version: int, change: RuntimeChange, file: str, before: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The whole config as it must read after the change (in place), as plain data."""
    new = copy.deepcopy(data)
    plugin = CRI_PLUGINS[version]
    plugins = table(new, "plugins", file, "")
    cri = table(plugins, plugin, file, "plugins")
    # Without a backup nothing is known of the file before cdictk: remove takes out all it could add.
    before_cri = _peek(before, "plugins", plugin) or {}
    plugins[plugin] = change_cri(cri, change, file, f'plugins."{plugin}"', before_cri)
    if change.remove:
        if not plugins[plugin] and plugin not in (_peek(before, "plugins") or {}):
            del plugins[plugin]
        if not plugins and "plugins" not in (before or {}):
            del new["plugins"]
    return new


def _runtime_table(
    section: dict[str, Any], runtimes: dict[str, Any], change: RuntimeChange, file: str
) -> dict[str, Any]:
    """Our entry: as it is when there is one (hand edits kept, a re-run changes nothing), else a copy of
    the default (else runc, else crun) runtime's settings; either way running our binary.

    Copying keeps what the node relies on, such as ``SystemdCgroup = true`` or a ``runtime_root``.
    """
    name = change.runtime_name
    base: dict[str, Any] = {}
    if isinstance(runtimes.get(name), dict):
        base = copy.deepcopy(runtimes[name])
    else:
        for source in (section.get("default_runtime_name"), "runc", "crun"):
            if isinstance(source, str) and source != name and isinstance(runtimes.get(source), dict):
                base = copy.deepcopy(runtimes[source])
                break
    base.setdefault("runtime_type", RUNC_V2)
    options = base.setdefault("options", {})
    if not isinstance(options, dict):
        raise CdictkError(file, f"runtimes.{name}.options", "is not a table")
    options["BinaryName"] = change.runtime_path
    # The CRI plugin copies a pod's or container's annotations into the OCI config only when the
    # runtime lists them: without this, a device plugin's cdi.k8s.io/ annotations never reach the shim
    # (containerd 1.6, or 1.7 and 2.x with CDI off, ignore them themselves).
    passed = base.get("container_annotations", [])
    if not isinstance(passed, list):
        raise CdictkError(file, f"runtimes.{name}.container_annotations", "is not a list")
    if CDI_ANNOTATIONS not in passed:
        base["container_annotations"] = [*passed, CDI_ANNOTATIONS]
    return base


def effective_cri(data: dict[str, Any], version: int, imported: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The CRI table containerd builds from the main config and its other imports, in order.

    containerd 1.x (config version 2) replaces a whole plugin table with an import's; 2.x merges keys.
    """
    plugin = CRI_PLUGINS[version]
    found = _peek(data, "plugins", plugin)
    if found is not None and not isinstance(found, dict):
        raise CdictkError("", f'plugins."{plugin}"', "is not a table")
    cri: dict[str, Any] = copy.deepcopy(found or {})
    for path, text in imported:
        other = _peek(tomledit.read(text, path), "plugins", plugin)
        if isinstance(other, dict):
            cri = copy.deepcopy(other) if version == 2 else _deep_merge(cri, other)
    return cri


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _ours(base: dict[str, Any], drop_in: dict[str, Any]) -> dict[str, Any]:
    """``base`` plus what an earlier run put in the drop-in: its runtimes that ``base`` lacks, and a
    default runtime or CDI settings that differ from ``base``'s. Everything else is taken afresh from
    ``base``, so edits to the main config reach the drop-in on the next run."""
    merged = copy.deepcopy(base)
    # The drop-in is ours, but a hand edit may have given it any shape: what is not a table is dropped
    # and rebuilt from base.
    old_section = _table(_peek(drop_in, "containerd"))
    section = merged.setdefault("containerd", {})
    if isinstance(section, dict):
        runtimes = section.setdefault("runtimes", {})
        for name, entry in _table(_peek(old_section, "runtimes")).items():
            if isinstance(runtimes, dict) and name not in runtimes:
                runtimes[name] = copy.deepcopy(entry)
        default = old_section.get("default_runtime_name")
        if default is not None and default != section.get("default_runtime_name"):
            section["default_runtime_name"] = default
        if not runtimes and "runtimes" not in (_peek(base, "containerd") or {}):
            del section["runtimes"]
        if not section and "containerd" not in base:
            del merged["containerd"]
    for key in ("enable_cdi", "cdi_spec_dirs"):
        if key in drop_in and drop_in[key] != base.get(key):
            merged[key] = copy.deepcopy(drop_in[key])
    return merged


def go_match(pattern: str, path: str) -> bool:
    """Go's filepath.Match, which containerd uses for imports: * and ? never match "/"."""
    regex, index = "", 0
    while index < len(pattern):
        char = pattern[index]
        if char == "*":
            regex += "[^/]*"
        elif char == "?":
            regex += "[^/]"
        elif char == "[":
            end = pattern.find("]", index + 2)
            if end < 0:
                return False  # Go: ErrBadPattern, matching nothing
            body = pattern[index + 1 : end]
            negated = body.startswith("^")
            body = body[1:] if negated else body
            regex += "[" + ("^" if negated else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]"
            index = end
        elif char == "\\" and index + 1 < len(pattern):
            index += 1
            regex += re.escape(pattern[index])
        else:
            regex += re.escape(char)
        index += 1
    try:
        return re.fullmatch(regex, path) is not None
    except re.error:
        return False


def configure_in_place(
    text: str, file: str, change: RuntimeChange, installed: int | None, before: dict[str, Any] | None = None
) -> Edit:
    """The main config edited in place; ``before`` is its content before cdictk first changed it."""
    check_change(change, file)
    document, data = tomledit.load(text, file)
    version = config_version(data, file, installed)
    intended = changed(data, version, change, file, before)
    if not data and not change.remove and version > 1:
        intended = {"version": version, **intended}
    if intended == data:
        return Edit(file, text)
    return Edit(file, tomledit.edit(document, data, intended, file, like=text))


def configure_drop_in(
    text: str,
    file: str,
    *,
    drop_in: str,
    drop_in_text: str | None,
    change: RuntimeChange,
    installed: int | None,
    imported: Sequence[tuple[str, str]] = (),
) -> list[Edit]:
    """The main file (its ``imports``) and the drop-in holding the whole CRI plugin table.

    ``imported`` are the main file's other imports (path, text) in containerd's order: the drop-in
    carries the CRI table containerd builds from them and the main file, plus cdictk's entries.
    """
    check_change(change, file)
    if drop_in_text is not None and drop_in_text.strip() and not drop_in_text.startswith(DROP_IN_HEADER):
        raise CdictkError(drop_in, "", "exists and was not written by cdictk; refusing to replace it")
    document, data = tomledit.load(text, file)
    version = config_version(data, file, installed)
    if version == 1:
        raise CdictkError(
            file, "version", "config version 1 has no imports: use --drop-in-config '' (in place)"
        )
    plugin = CRI_PLUGINS[version]
    imports = data.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(entry, str) for entry in imports):
        raise CdictkError(file, "imports", "is not a list of paths")
    base = effective_cri(data, version, imported)
    earlier = _peek(tomledit.read(drop_in_text, drop_in), "plugins", plugin) if drop_in_text else None
    current = _ours(base, earlier if isinstance(earlier, dict) else {})
    cri = change_cri(current, change, drop_in, f'plugins."{plugin}"', base)
    main = copy.deepcopy(data)
    if cri == base:  # nothing of cdictk's left: no drop-in, and no import of it
        drop_edit = Edit(drop_in, None)
        if drop_in in imports:
            kept = [entry for entry in imports if entry != drop_in]
            if kept:
                main["imports"] = kept
            else:
                del main["imports"]
    else:
        drop_data = {"version": version, "plugins": {plugin: cri}}
        drop_edit = Edit(drop_in, _drop_in_text(drop_data, drop_in, drop_in_text))
        directory = os.path.dirname(file)
        if not any(go_match(os.path.join(directory, entry), drop_in) for entry in imports):
            main["imports"] = [*imports, drop_in]
        if "version" not in main:
            main = {"version": version, **main}
    if main == data:
        return [Edit(file, text), drop_edit]
    return [Edit(file, tomledit.edit(document, data, main, file, like=text)), drop_edit]


def _drop_in_text(data: dict[str, Any], file: str, current: str | None) -> str:
    """The drop-in's text; the current text itself when it already says the same (no rewrite)."""
    if current is not None:
        current_data = tomledit.read(current, file)
        if current_data == data:
            return current
    header = DROP_IN_HEADER + ": the CRI plugin table containerd builds from its config, plus cdictk.\n"
    return header + tomledit.edit(tomlkit.document(), {}, data, file)


def plan(main: writer.Current, drop_in: writer.Current | None, change: RuntimeChange) -> Plan:
    installed = installed_version() if not (main.text or "").strip() else None
    if drop_in is None:
        edit = configure_in_place(main.text or "", main.path, change, installed, before(main.path))
        return Plan(((main, edit),))
    main_edit, drop_edit = configure_drop_in(
        main.text or "",
        main.path,
        drop_in=drop_in.path,
        drop_in_text=drop_in.text,
        change=change,
        installed=installed,
        imported=_other_imports(main, drop_in.path),
    )
    # The drop-in exists before the import that names it, and the import goes before the drop-in.
    order = (
        ((main, main_edit), (drop_in, drop_edit))
        if drop_edit.text is None
        else ((drop_in, drop_edit), (main, main_edit))
    )
    return Plan(order, own=frozenset({drop_in.path}))


def before(path: str) -> dict[str, Any] | None:
    """The TOML config as it was before cdictk first changed it (its backup), for --remove to restore."""
    data = writer.read_backup(path)
    if data is None:
        return None
    try:
        return tomllib.loads(data.decode("utf-8"))
    # ValueError: not UTF-8 or not TOML, or an integer past Python's digit limit; RecursionError: nested
    # too deeply. A backup that cannot be read has nothing to restore.
    except (ValueError, RecursionError):
        return None


def _other_imports(main: writer.Current, drop_in: str) -> list[tuple[str, str]]:
    """The files the main config imports (globs expanded the way containerd does), except our drop-in."""
    if not main.text:
        return []
    try:
        imports = tomllib.loads(main.text).get("imports", [])
    except (ValueError, RecursionError):  # not TOML, or past tomllib's limits (as in before)
        return []  # the edit itself reports the problem, with its position
    found: list[tuple[str, str]] = []
    directory = os.path.dirname(main.path)
    for entry in imports if isinstance(imports, list) else []:
        if not isinstance(entry, str):
            continue
        pattern = os.path.join(directory, entry)
        paths = sorted(glob.glob(pattern)) if any(c in entry for c in "*?[") else [pattern]
        for path in paths:
            if os.path.realpath(path) == os.path.realpath(drop_in) or not os.path.isfile(path):
                continue
            text = writer.read(path, follow_symlinks=True).text
            if text is not None:
                found.append((path, text))
    return found


def inspect(files: Sequence[tuple[str, str]]) -> Inspection:
    """A true ``enable_cdi`` anywhere (containerd 2.0, config version 3, has it on by default; 1.7 off),
    and the runtimes whose ``BinaryName`` is cdictk-runtime."""
    parsed, problem = parse_all(files)
    pairs = [pair for data in parsed for pair in walk(data)]
    found = shim_paths(value for key, value in pairs if key == "BinaryName")
    versions = [data["version"] for data in parsed if isinstance(data.get("version"), int)]
    version = max(versions, default=1)
    on = any(key == "enable_cdi" and value is True for key, value in pairs) or version >= 3
    return Inspection(on, found, f"config version {version}: {describe(on, found)}", problem)


def parse_all(files: Sequence[tuple[str, str]]) -> tuple[list[dict[str, Any]], str]:
    """The TOML files that parse, and the first that does not ("cannot parse FILE: why"; "" if none)."""
    parsed: list[dict[str, Any]] = []
    problem = ""
    for path, text in files:
        try:
            parsed.append(tomllib.loads(text))
        except ValueError as exc:  # TOMLDecodeError, or an integer past Python's digit limit
            problem = problem or f"cannot parse {path}: {exc}"
        except RecursionError:
            problem = problem or f"cannot parse {path}: nested too deeply"
    return parsed, problem


def walk(value: Any) -> list[tuple[str, Any]]:
    """Every (key, value) pair of nested tables."""
    pairs: list[tuple[str, Any]] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                pairs.append((key, child))
                pending.append(child)
        elif isinstance(item, list):
            pending.extend(item)
    return pairs
