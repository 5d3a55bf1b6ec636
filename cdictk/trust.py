"""Start path: standard library only.

Whether a path is root's alone: nobody but root (or the user running us) could change what it names.

cdictk runs as root and reads files that decide what runs as root: CDI specs (their hooks end up in
``config.json``), the Python it is launched with and its import path, its parse cache. Such a file is
only as safe as every name on the way to it, so the check walks from the file up to ``/``:

- every entry must belong to root or to the reading user (``owners``);
- the file itself (or the directory, when it is what we read or write into) must not be writable by
  group or others;
- a directory above it may be writable by others only with the sticky bit (``/tmp``): there the
  kernel lets nobody but an entry's owner rename or remove it, so root's entries stay root's;
- a symlink owned by root is followed by checking where it leads too (its own mode means nothing,
  and only its owner could have made it point elsewhere).

The walk is done along the path as written and along its resolved form. Nothing here opens a file:
a path that passes cannot be changed by anyone but root afterwards, so opening it later reads what
was checked. Standard library only (``os``, ``stat``, ``sys``), and no cdictk import: a launcher runs
this module's code, copied beside it as ``cdictk_trust.py``, before it trusts anything of cdictk
(:mod:`cdictk.runtime.startcheck`); so it holds what a start needs and nothing else, and the checks
made off the start path (a whole package tree, the repairs) are in :mod:`cdictk.trustscan`.
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    # A directory checked already -> (its problem as a parent, whether a symlink is on its way to /).
    Seen = dict[str, tuple[str | None, bool]]

WRITABLE = 0o022  # group or others


def owners_of_trust() -> frozenset[int]:
    """Root, and the user running us (a rootless setup trusts its own files)."""
    return frozenset({0, os.geteuid()})


def path_problem(
    path: str,
    *,
    owners: frozenset[int] | None = None,
    leaf_sticky_ok: bool = False,
    seen: Seen | None = None,
) -> str | None:
    """Why ``path`` is not root's alone ("PATH: owned by uid 1000"), or None when it is.

    ``leaf_sticky_ok``: ``path`` is a directory we only look up names in (the parent of something to be
    made), so a sticky world-writable one is fine. ``seen`` memoises directories across calls (the
    spec dirs' files share their parents): pass the same empty dict to each.
    """
    owners = owners if owners is not None else owners_of_trust()
    absolute = os.path.abspath(path)
    problem, linked = _chain_problem(absolute, owners, leaf_sticky_ok, seen)
    if problem is not None or not linked:  # no symlink on the way: where it leads is what was checked
        return problem
    real = os.path.realpath(absolute)
    if real == absolute:
        return None
    return _chain_problem(real, owners, leaf_sticky_ok, seen)[0]


def _chain_problem(
    path: str, owners: frozenset[int], leaf_sticky_ok: bool, seen: Seen | None
) -> tuple[str | None, bool]:
    """The problem of ``path`` or of a directory above it, and whether a symlink is on the way."""
    found: list[tuple[str, str | None, bool]] = []  # (entry, its own problem, is a link), leaf first
    above: tuple[str | None, bool] = (None, False)  # what holds above the last entry looked at
    leaf = True
    while True:
        if not leaf and seen is not None and path in seen:
            above = seen[path]
            break
        try:
            st = os.lstat(path)
        except OSError as exc:
            found.append((path, f"{path}: {exc.strerror}", False))
            break
        problem = stat_problem(path, st, owners, sticky_ok=leaf_sticky_ok or not leaf)
        found.append((path, problem, stat.S_ISLNK(st.st_mode)))
        if problem is not None or path == "/":
            break
        path, leaf = os.path.dirname(path), False
    problem, linked = above
    for index in range(len(found) - 1, -1, -1):  # from the top down: each holds for all below it
        entry, own, link = found[index]
        problem, linked = own or problem, link or linked
        if index and seen is not None:  # the leaf is judged as a leaf: never remembered as a parent
            seen[entry] = (problem, linked)
    return problem, linked


def stat_problem(path: str, st: os.stat_result, owners: frozenset[int], *, sticky_ok: bool) -> str | None:
    if st.st_uid not in owners:
        return f"{path}: owned by uid {st.st_uid}, not root"
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & WRITABLE:
        return None
    if sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return None
    return f"{path}: writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"


def paths_problem(paths: list[str], *, owners: frozenset[int] | None = None) -> str | None:
    """The first of ``paths`` that is not root's alone (:func:`path_problem`), or None; one memo of
    directories for all, since the paths of one Python share most of their parents."""
    seen: Seen = {}
    for path in paths:
        problem = path_problem(path, owners=owners, seen=seen)
        if problem is not None:
            return problem
    return None


class UntrustedImport(Exception):
    """A module file Python was about to load that someone other than root could change."""


class GuardedFinder:
    """Python's path finder, refusing to hand over a module whose file someone else could change.

    A launcher puts it in the place of ``PathFinder`` on ``sys.meta_path`` (:func:`guard_imports`).
    Every module found on ``sys.path`` (source, bytecode, extension) is checked before Python reads
    it: the file (owner and mode; a link along its chain and where it leads) and its directory as
    :func:`path_problem` checks a path, and so the cached bytecode Python would read instead, and the
    ``__pycache__`` it sits in. Only what is imported is looked at, each directory once: a start of
    the runtime shim imports twenty modules of a package of hundreds of files.
    """

    def __init__(self, finder: Any, owners: frozenset[int]) -> None:
        self._finder = finder
        self._owners = owners
        self._seen: Seen = {}
        self._directories: dict[str, str | None] = {}

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        spec: ModuleSpec | None = self._finder.find_spec(name, path, target)
        if spec is not None and spec.has_location and spec.origin:
            problem = self._file_problem(spec.origin, missing_ok=False)
            if problem is None and spec.cached:
                problem = self._file_problem(spec.cached, missing_ok=True)
            if problem is not None:
                raise UntrustedImport(
                    f"{problem}: someone other than root could change it; {name} not loaded"
                )
        return spec

    def __getattr__(self, name: str) -> Any:  # invalidate_caches, find_distributions: the finder's
        return getattr(self._finder, name)

    def _file_problem(self, path: str, *, missing_ok: bool) -> str | None:
        directory = os.path.dirname(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            # No bytecode yet: Python may read one written into its directory meanwhile.
            return self._directory_problem(directory, missing_ok=True) if missing_ok else None
        except OSError as exc:
            return f"{path}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return path_problem(path, owners=self._owners, seen=self._seen)
        return stat_problem(path, st, self._owners, sticky_ok=False) or self._directory_problem(
            directory, missing_ok=False
        )

    def _directory_problem(self, directory: str, *, missing_ok: bool) -> str | None:
        if directory not in self._directories:
            if missing_ok and not os.path.lexists(directory):
                return None
            self._directories[directory] = path_problem(directory, owners=self._owners, seen=self._seen)
        return self._directories[directory]


def guard_imports(owners: frozenset[int]) -> None:
    """Put a :class:`GuardedFinder` in the place of the path finder of ``sys.meta_path``."""
    for index, finder in enumerate(sys.meta_path):
        if getattr(finder, "__name__", "") == "PathFinder":
            sys.meta_path[index] = GuardedFinder(finder, owners)
            return
    raise UntrustedImport("no path finder on sys.meta_path to guard: cdictk not started")
