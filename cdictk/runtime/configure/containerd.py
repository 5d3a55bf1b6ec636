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
"""

from __future__ import annotations

import copy
import fnmatch
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from cdictk.errors import CdictkError
from cdictk.runtime.configure import tomledit

CRI_PLUGINS = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_V2 = "io.containerd.runc.v2"
DEFAULT_CONFIG = "/etc/containerd/config.toml"
DEFAULT_DROP_IN = "/etc/containerd/conf.d/99-cdictk.toml"
DEFAULT_CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True, slots=True)
class RuntimeChange:
    """What configure adds (or, with ``remove``, takes away); shared by containerd and CRI-O."""

    runtime_name: str = "cdictk"
    runtime_path: str = "/usr/local/bin/cdictk-runtime"
    set_as_default: bool = False
    enable_cdi: bool = False
    cdi_spec_dirs: tuple[str, ...] = ()
    remove: bool = False


@dataclass(frozen=True, slots=True)
class Edit:
    """A file's new text; None deletes the file (a drop-in that is no longer needed)."""

    path: str
    text: str | None


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


def _table(parent: dict[str, Any], key: str, file: str, where: str) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        shown = f'"{key}"' if "." in key else key
        raise CdictkError(file, f"{where}.{shown}" if where else shown, "is not a table")
    return value


def changed(data: dict[str, Any], version: int, change: RuntimeChange, file: str) -> dict[str, Any]:
    """The whole config as it must read after the change, as plain data."""
    new = copy.deepcopy(data)
    plugin = CRI_PLUGINS[version]
    cri = _table(_table(new, "plugins", file, ""), plugin, file, "plugins")
    where = f'plugins."{plugin}"'
    section = _table(cri, "containerd", file, where)
    runtimes = _table(section, "runtimes", file, f"{where}.containerd")
    name = change.runtime_name
    if change.remove:
        runtimes.pop(name, None)
        if runtimes == {"runc": {"runtime_type": RUNC_V2}}:
            del runtimes["runc"]  # what configure adds to a config that named no runtime: the built-in one
        if section.get("default_runtime_name") == name:
            del section["default_runtime_name"]
        if change.enable_cdi:
            cri.pop("enable_cdi", None)
        if change.cdi_spec_dirs or (
            change.enable_cdi and cri.get("cdi_spec_dirs") == list(DEFAULT_CDI_SPEC_DIRS)
        ):
            cri.pop("cdi_spec_dirs", None)
        _prune(new, ["plugins", plugin, "containerd", "runtimes"])
        return new
    if not runtimes:
        runtimes["runc"] = {"runtime_type": RUNC_V2}
    runtimes[name] = _runtime_table(section, runtimes, change, file)
    if change.set_as_default:
        section["default_runtime_name"] = name
    if change.enable_cdi:
        cri["enable_cdi"] = True
        # Spelled out even when they are containerd's defaults, so the file says where specs are read.
        cri.setdefault("cdi_spec_dirs", list(DEFAULT_CDI_SPEC_DIRS))
    if change.cdi_spec_dirs:
        cri["cdi_spec_dirs"] = list(change.cdi_spec_dirs)
    return new


def _runtime_table(
    section: dict[str, Any], runtimes: dict[str, Any], change: RuntimeChange, file: str
) -> dict[str, Any]:
    """A copy of the default (else runc, else crun) runtime's settings, running our binary.

    Copying keeps what the node relies on, such as ``SystemdCgroup = true`` or a ``runtime_root``.
    """
    name = change.runtime_name
    base: dict[str, Any] = {}
    for source in (section.get("default_runtime_name"), "runc", "crun"):
        if isinstance(source, str) and source != name and isinstance(runtimes.get(source), dict):
            base = copy.deepcopy(runtimes[source])
            break
    if isinstance(runtimes.get(name), dict):
        base = {**base, **copy.deepcopy(runtimes[name])}  # a re-run keeps the user's edits to our entry
    base.setdefault("runtime_type", RUNC_V2)
    options = base.setdefault("options", {})
    if not isinstance(options, dict):
        raise CdictkError(file, f"runtimes.{name}.options", "is not a table")
    options["BinaryName"] = change.runtime_path
    return base


def _prune(data: dict[str, Any], path: list[str]) -> None:
    """Drop the tables along ``path`` that the removal left empty, innermost first."""
    for depth in range(len(path), 0, -1):
        parent = data
        for key in path[: depth - 1]:
            parent = parent.get(key, {})
        if parent.get(path[depth - 1]) == {}:
            del parent[path[depth - 1]]


def configure_in_place(text: str, file: str, change: RuntimeChange, installed: int | None) -> Edit:
    document, data = tomledit.load(text, file)
    version = config_version(data, file, installed)
    intended = changed(data, version, change, file)
    if not data and not change.remove:
        intended = {"version": version, **intended} if version > 1 else intended
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
) -> list[Edit]:
    """The main file (its ``imports``) and the drop-in holding the whole CRI plugin table."""
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
    listed = any(fnmatch.fnmatch(drop_in, pattern) for pattern in imports)
    main = copy.deepcopy(data)
    if change.remove:
        main_imports = [entry for entry in imports if entry != drop_in]
        if main_imports != imports:
            if main_imports:
                main["imports"] = main_imports
            else:
                del main["imports"]
        drop_edit = Edit(drop_in, None)
    else:
        if not listed:
            main["imports"] = [*imports, drop_in]
        if "version" not in main:
            main = {"version": version, **main}
        cri = changed(data, version, change, file)["plugins"][plugin]
        drop_data = {"version": version, "plugins": {plugin: cri}}
        drop_edit = Edit(drop_in, _drop_in_text(drop_data, drop_in, drop_in_text))
    if main == data:
        main_edit = Edit(file, text)
    else:
        main_edit = Edit(file, tomledit.edit(document, data, main, file, like=text))
    return [main_edit, drop_edit]


def _drop_in_text(data: dict[str, Any], file: str, current: str | None) -> str:
    """The drop-in's text; the current text itself when it already says the same (no rewrite)."""
    import tomlkit  # noqa: PLC0415

    if current is not None:
        _, current_data = tomledit.load(current, file)
        if current_data == data:
            return current
    header = (
        "# Written by `cdictk runtime configure`: the CRI plugin table of the main config, plus cdictk.\n"
    )
    return header + tomledit.edit(tomlkit.document(), {}, data, file)
