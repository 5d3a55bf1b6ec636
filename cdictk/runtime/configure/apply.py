"""``cdictk runtime configure``: read the engine's files, compute the edit, write it carefully."""

from __future__ import annotations

import glob
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdictk.errors import CdictkError
from cdictk.runtime.configure import containerd, crio, writer
from cdictk.runtime.configure.change import Edit, RuntimeChange

DEFAULT_CONFIGS = {
    "containerd": containerd.DEFAULT_CONFIG,
    "crio": crio.DEFAULT_CONFIG,
    "docker": "/etc/docker/daemon.json",
}
DEFAULT_DROP_INS = {"containerd": containerd.DEFAULT_DROP_IN, "crio": crio.DEFAULT_DROP_IN}


@dataclass(frozen=True, slots=True)
class Request:
    engine: str
    config: str | None  # None: the engine's default
    drop_in: str | None  # None: the engine's default; "": edit the main config in place
    name: str
    path: str
    set_as_default: bool = False
    enable_cdi: bool = False
    cdi_spec_dirs: tuple[str, ...] = ()
    remove: bool = False
    dry_run: bool = False
    follow_symlinks: bool = False


def configure(request: Request, report: Callable[[str], None]) -> bool:
    """Carry out ``request``, reporting each file as it is written (so a failure on a second file
    leaves no doubt about the first). True when anything changed (or would, with ``dry_run``)."""
    config = request.config or DEFAULT_CONFIGS[request.engine]
    change = RuntimeChange(
        runtime_name=request.name,
        runtime_path=request.path,
        set_as_default=request.set_as_default,
        enable_cdi=request.enable_cdi,
        cdi_spec_dirs=request.cdi_spec_dirs,
        remove=request.remove,
    )
    if request.engine == "docker" and request.drop_in:
        raise CdictkError("", "--drop-in-config", "docker has no drop-in configs")
    if request.engine == "crio" and request.enable_cdi:
        raise CdictkError("", "--enable-cdi", "CRI-O has CDI on by default")
    if request.engine == "crio" and request.cdi_spec_dirs:
        raise CdictkError(
            "", "--cdi-spec-dir", "CRI-O's CDI spec dirs are set in crio.conf ([crio.runtime] cdi_spec_dirs)"
        )
    drop_in = None if request.engine == "docker" else request.drop_in
    if drop_in is None and request.engine != "docker":
        drop_in = DEFAULT_DROP_INS[request.engine]
    for path, flag in ((config, "--config"), (drop_in, "--drop-in-config")):
        if path and not os.path.isabs(path):
            raise CdictkError(path, flag, "must be an absolute path")
    with writer.locked(config, create=not request.dry_run):
        main = writer.read(config, follow_symlinks=request.follow_symlinks)
        drop = writer.read(drop_in, follow_symlinks=request.follow_symlinks) if drop_in else None
        if drop is not None and os.path.realpath(drop.path) == os.path.realpath(main.path):
            raise CdictkError(drop.path, "--drop-in-config", "is the main config itself")
        if request.engine == "docker":
            return _commit_all([(main, _docker(main, change, _before_json(main.path)))], request, report)
        if request.engine == "crio":
            if drop is None:
                edit = crio.configure(
                    main.text or "", main.path, None, main.path, change, before=_before(main.path)
                )
                return _commit_all([(main, edit)], request, report)
            edit = crio.configure(drop.text or "", drop.path, main.text, main.path, change)
            return _commit_all([(drop, edit)], request, report, own={drop.path})
        installed = containerd.installed_version() if not (main.text or "").strip() else None
        if drop is None:
            edit = containerd.configure_in_place(
                main.text or "", main.path, change, installed, _before(main.path)
            )
            return _commit_all([(main, edit)], request, report)
        main_edit, drop_edit = containerd.configure_drop_in(
            main.text or "",
            main.path,
            drop_in=drop.path,
            drop_in_text=drop.text,
            change=change,
            installed=installed,
            imported=_other_imports(main, drop.path),
        )
        # The drop-in exists before the import that names it, and the import goes before the drop-in.
        order = (
            [(main, main_edit), (drop, drop_edit)]
            if drop_edit.text is None
            else [(drop, drop_edit), (main, main_edit)]
        )
        return _commit_all(order, request, report, own={drop.path})


def _before(path: str) -> dict[str, Any] | None:
    """The config as it was before cdictk first changed it (its backup), for --remove to restore."""
    try:
        with open(path + writer.BACKUP_SUFFIX, "rb") as handle:
            return tomllib.loads(handle.read(writer.MAX_CONFIG_BYTES).decode("utf-8"))
    # ValueError: not UTF-8 or not TOML, or an integer past Python's digit limit; RecursionError: nested
    # too deeply. A backup that cannot be read has nothing to restore.
    except (OSError, ValueError, RecursionError):
        return None


def _other_imports(main: writer.Current, drop_in: str) -> list[tuple[str, str]]:
    """The files the main config imports (globs expanded the way containerd does), except our drop-in."""
    if not main.text:
        return []
    try:
        imports = tomllib.loads(main.text).get("imports", [])
    except (ValueError, RecursionError):  # not TOML, or past tomllib's limits (as in _before)
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


def _before_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path + writer.BACKUP_SUFFIX, "rb") as handle:
            data = json.loads(handle.read(writer.MAX_CONFIG_BYTES) or b"{}")
    except (OSError, ValueError, RecursionError):  # as in _before
        return None
    return data if isinstance(data, dict) else None


def _docker(main: writer.Current, change: RuntimeChange, before: dict[str, Any] | None) -> Edit:
    from cdictk.runtime.configure.docker import configure_docker  # noqa: PLC0415

    return Edit(main.path, configure_docker(main.text, main.path, change, before))


def _commit_all(
    edits: list[tuple[writer.Current, Edit]],
    request: Request,
    report: Callable[[str], None],
    own: frozenset[str] | set[str] = frozenset(),
) -> bool:
    for _current, edit in edits:
        if edit.text is not None:
            try:
                edit.text.encode("utf-8")
            except UnicodeEncodeError:
                raise CdictkError(
                    edit.path, "", "the new content is not valid UTF-8; nothing written"
                ) from None
    any_change = False
    for current, edit in edits:
        changed = writer.commit(current, edit.text, dry_run=request.dry_run, backup=current.path not in own)
        any_change = any_change or changed
        if not changed:
            report(f"{current.path}: unchanged")
        elif request.dry_run:
            report(f"{current.path}: would change (diff above)")
        elif edit.text is None:
            report(f"{current.path}: removed")
        else:
            report(f"{current.path}: written")
    return any_change
