"""The thorough trust checks, made off the container start path: a whole package tree, and repairs.

``cdictk runtime install-launchers`` walks the package it will run as root; ``cdictk info`` prints the
commands that would make an untrusted spec root's. The rules are :mod:`cdictk.startpath.trust`'s; this module
is kept out of it because a launcher carries that module's code in its text on every start. Standard
library only.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from cdictk.startpath.trust import (
    WRITABLE,
    Walk,
    absolute,
    owners_of_trust,
    path_problem,
    paths_problem,
    stat_problem,
)

if TYPE_CHECKING:  # a type alias that trust.py defines only for type checkers
    from cdictk.startpath.trust import Seen


def first_problem(paths: list[str], trees: list[str], *, owners: frozenset[int] | None = None) -> str | None:
    """The first of ``paths`` (:func:`cdictk.startpath.trust.path_problem`) and ``trees``
    (:func:`tree_problem`) with a problem; the paths first, then the trees."""
    problem = paths_problem(paths, owners=owners)
    if problem is not None:
        return problem
    seen: Seen = {}
    for tree in trees:
        problem = tree_problem(tree, owners=owners, seen=seen)
        if problem is not None:
            return problem
    return None


def repairs(path: str, *, owners: frozenset[int] | None = None) -> list[list[str]]:
    """The commands that would make ``path`` root's alone: ``chown`` or ``chmod`` of every entry at
    fault on the way the kernel walks it (:class:`cdictk.startpath.trust.Walk`), from ``/`` down; a missing
    entry ends the way and has no repair."""
    walk = _Repairs(owners if owners is not None else owners_of_trust())
    walk.walk(absolute(path))
    return walk.found


class _Repairs(Walk):
    """A walk that passes every entry, noting the repairs of those at fault."""

    __slots__ = ("found", "owners")

    def __init__(self, owners: frozenset[int]) -> None:
        super().__init__()
        self.owners = owners
        self.found: list[list[str]] = []

    def judge(self, path: str, st: os.stat_result, leaf: bool) -> str | None:
        commands = []
        if st.st_uid not in self.owners:
            commands.append(
                ["chown", "-h", "root:", path] if stat.S_ISLNK(st.st_mode) else ["chown", "root:", path]
            )
        # Its mode alone (its owner is judged above): the same stat, with its owner taken as trusted.
        if stat_problem(path, st, frozenset({st.st_uid}), sticky_ok=not leaf) is not None:
            commands.append(["chmod", "go-w", path])
        self.found += [command for command in commands if command not in self.found]
        return None

    def missing(self, path: str, error: OSError, parent: str) -> str | None:
        return None


def tree_problem(root: str, *, owners: frozenset[int] | None = None, seen: Seen | None = None) -> str | None:
    """Why ``root`` or anything under it is not root's alone, or None: a package Python imports from.

    ``root`` is checked as :func:`path_problem` checks it, then every directory and file under it,
    whatever its name (``__pycache__`` too: Python reads what it finds there). A link in the tree is
    checked along its own chain and where it leads, and a directory it leads to is walked as well.
    Each entry costs one ``fstatat`` and little else.
    """
    owners = owners if owners is not None else owners_of_trust()
    problem = path_problem(root, owners=owners, seen=seen)
    pending = [os.path.realpath(root)]
    walked = set()
    while pending and problem is None:
        directory = pending.pop()
        if directory in walked:  # two links to one directory, or a loop
            continue
        walked.add(directory)
        try:
            problem = _directory_problem(directory, owners, seen, pending)
        except OSError as exc:
            problem = f"{directory}: {exc.strerror}"
    return problem


def _directory_problem(
    directory: str, owners: frozenset[int], seen: Seen | None, pending: list[str]
) -> str | None:
    """The first entry of ``directory`` (checked already, as are its parents) that is not root's alone;
    the directories in it go on ``pending``."""
    # Listed through a descriptor, each entry's fstatat skips the walk down from / that a path costs.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    link = f"{directory}/{entry.name}"
                    problem = path_problem(link, owners=owners, seen=seen)
                    if problem is not None:
                        return problem
                    if os.path.isdir(link):
                        pending.append(os.path.realpath(link))
                elif st.st_uid not in owners or st.st_mode & WRITABLE:
                    return stat_problem(f"{directory}/{entry.name}", st, owners, sticky_ok=False)
                elif stat.S_ISDIR(st.st_mode):
                    pending.append(f"{directory}/{entry.name}")
    finally:
        os.close(fd)
    return None
