"""``cdictk runtime configure``: read the engine's files, compute the edit, write it carefully.

Engine-neutral: the engine's record (:mod:`cdictk.configure.engines`) gives its default
paths, refuses what it has no place for, and plans the edits; this module locks, reads and commits.

``--remove`` takes cdictk's entries out of a config another hand may have changed since, keeping
theirs. When the main config is still exactly what configure made of its backup (nobody changed it
since), the backup itself is put back instead, byte for byte (an empty one: the file removed), and
the backup goes: the file is as it was before cdictk, not merely equivalent to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable

from cdictk.configure import writer
from cdictk.configure.change import Edit, Plan, Request, RuntimeChange
from cdictk.configure.engines import ENGINES, Engine
from cdictk.startpath.helpers.errors import CdictkError


def configure(request: Request, report: Callable[[str], None]) -> bool:
    """Carry out ``request``, reporting each file as it is written (so a failure on a second file
    leaves no doubt about the first). True when anything changed (or would, with ``dry_run``)."""
    engine = ENGINES[request.engine]
    config = request.config or engine.config
    change = RuntimeChange(
        runtime_name=request.name,
        runtime_path=request.path,
        set_as_default=request.set_as_default,
        enable_cdi=request.enable_cdi,
        cdi_spec_dirs=request.cdi_spec_dirs,
        remove=request.remove,
    )
    engine.check(request)
    drop_in = engine.drop_in_for(config) if request.drop_in is None else request.drop_in
    for path, flag in ((config, "--config"), (drop_in, "--drop-in-config")):
        if path and not os.path.isabs(path):
            raise CdictkError(path, flag, "must be an absolute path")
    with writer.locked(config, create=not request.dry_run):
        main = writer.read(config, follow_symlinks=request.follow_symlinks)
        drop = writer.read(drop_in, follow_symlinks=request.follow_symlinks) if drop_in else None
        if drop is not None and os.path.realpath(drop.path) == os.path.realpath(main.path):
            raise CdictkError(drop.path, "--drop-in-config", "is the main config itself")
        plan = engine.plan(main, drop, change)
        original = _original(engine, main, drop, change) if change.remove else None
        if original is None:
            return _commit_all(plan, request, report)
        edits = tuple(
            (current, Edit(current.path, original or None) if current.path == main.path else edit)
            for current, edit in plan.edits
        )
        changed = _commit_all(Plan(edits, plan.own), request, report)
        if not request.dry_run:
            backup = main.path + writer.BACKUP_SUFFIX
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backup)
            report(f"{main.path}: as it was before cdictk first changed it; {backup} removed")
        return changed


def _original(
    engine: Engine, main: writer.Current, drop: writer.Current | None, change: RuntimeChange
) -> str | None:
    """The backup's text when the main config is what configure made of it; else None."""
    backup = writer.read_backup(main.path)
    if backup is None or main.text is None:
        return None
    try:
        text = backup.decode("utf-8")
        made = engine.plan(
            writer.Current(main.path, text or None),
            None if drop is None else writer.Current(drop.path, None),
            dataclasses.replace(change, remove=False),
        )
    except (UnicodeDecodeError, CdictkError):
        return None
    if not any(current.path == main.path and edit.text == main.text for current, edit in made.edits):
        return None
    return text


def _commit_all(plan: Plan, request: Request, report: Callable[[str], None]) -> bool:
    for _current, edit in plan.edits:
        if edit.text is not None:
            try:
                edit.text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise CdictkError(
                    edit.path, "", "the new content is not valid UTF-8; nothing written"
                ) from exc
    any_change = False
    for current, edit in plan.edits:
        changed = writer.commit(
            current, edit.text, dry_run=request.dry_run, backup=current.path not in plan.own
        )
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
