"""``cdictk runtime configure``: read the engine's files, compute the edit, write it carefully.

Engine-neutral: the engine's record (:mod:`cdictk.configure.engines`) gives its default
paths, refuses what it has no place for, and plans the edits; this module locks, reads and commits.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cdictk.configure import writer
from cdictk.configure.change import Plan, Request, RuntimeChange
from cdictk.configure.engines import ENGINES
from cdictk.errors import CdictkError


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
        return _commit_all(engine.plan(main, drop, change), request, report)


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
