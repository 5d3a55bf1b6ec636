"""Whether a path is root's alone: nobody but root (or the user running us) could change what it names.

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
was checked. Standard library only (``os`` and ``stat``), and no cdictk import: a launcher runs this
module's code, carried in its own text, before it trusts anything of cdictk
(:mod:`cdictk.runtime.startcheck`).
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

_WRITABLE = 0o022  # group or others


def owners_of_trust() -> frozenset[int]:
    """Root, and the user running us (a rootless setup trusts its own files)."""
    return frozenset({0, os.geteuid()})


def path_problem(
    path: str,
    *,
    owners: frozenset[int] | None = None,
    leaf_sticky_ok: bool = False,
    seen: dict[str, str] | None = None,
) -> str | None:
    """Why ``path`` is not root's alone ("PATH: owned by uid 1000"), or None when it is.

    ``leaf_sticky_ok``: ``path`` is a directory we only look up names in (the parent of something to be
    made), so a sticky world-writable one is fine. ``seen`` memoises directories across calls (the
    spec dirs' files share their parents); it maps a checked directory to its problem ("" for none).
    """
    owners = owners if owners is not None else owners_of_trust()
    absolute = os.path.abspath(path)
    problem = _chain_problem(absolute, owners, leaf_sticky_ok, seen)
    if problem is not None:
        return problem
    real = os.path.realpath(absolute)
    if real == absolute:
        return None
    return _chain_problem(real, owners, leaf_sticky_ok, seen)


def _chain_problem(
    path: str, owners: frozenset[int], leaf_sticky_ok: bool, seen: dict[str, str] | None
) -> str | None:
    leaf = True
    while True:
        if not leaf and seen is not None and path in seen:
            return seen[path] or None
        problem = _entry_problem(path, owners, sticky_ok=leaf_sticky_ok or not leaf)
        if not leaf and seen is not None:
            seen[path] = problem or ""
        if problem is not None:
            return problem
        if path == "/":
            return None
        path, leaf = os.path.dirname(path), False


def _entry_problem(path: str, owners: frozenset[int], *, sticky_ok: bool) -> str | None:
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return _stat_problem(path, st, owners, sticky_ok=sticky_ok)


def _stat_problem(path: str, st: os.stat_result, owners: frozenset[int], *, sticky_ok: bool) -> str | None:
    if st.st_uid not in owners:
        return f"{path}: owned by uid {st.st_uid}, not root"
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & _WRITABLE:
        return None
    if sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return None
    return f"{path}: writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"


def repairs(path: str, *, owners: frozenset[int] | None = None) -> list[list[str]]:
    """The commands that would make ``path`` root's alone: ``chown`` or ``chmod`` of every entry at
    fault, along the path as written and where it leads (a missing entry has no repair)."""
    owners = owners if owners is not None else owners_of_trust()
    absolute = os.path.abspath(path)
    found: list[list[str]] = []
    for chain in dict.fromkeys((absolute, os.path.realpath(absolute))):
        current, leaf = chain, True
        while True:
            for command in _entry_repairs(current, owners, sticky_ok=not leaf):
                if command not in found:
                    found.append(command)
            if current == "/":
                break
            current, leaf = os.path.dirname(current), False
    return found


def _entry_repairs(path: str, owners: frozenset[int], *, sticky_ok: bool) -> list[list[str]]:
    try:
        st = os.lstat(path)
    except OSError:
        return []
    commands = []
    if st.st_uid not in owners:
        commands.append(
            ["chown", "-h", "root:", path] if stat.S_ISLNK(st.st_mode) else ["chown", "root:", path]
        )
    if _entry_problem(path, frozenset({st.st_uid}), sticky_ok=sticky_ok) is not None:
        commands.append(["chmod", "go-w", path])
    return commands


def tree_problem(
    root: str, *, owners: frozenset[int] | None = None, seen: dict[str, str] | None = None
) -> str | None:
    """Why ``root`` or anything under it is not root's alone, or None: a package Python imports from.

    ``root`` is checked as :func:`path_problem` checks it, then every directory and file under it,
    whatever its name (``__pycache__`` too: Python reads what it finds there). A link in the tree is
    checked along its own chain and where it leads, and a directory it leads to is walked as well.
    A launcher runs this on every start, so each entry costs one ``fstatat`` and little else.
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
    directory: str, owners: frozenset[int], seen: dict[str, str] | None, pending: list[str]
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
                elif st.st_uid not in owners or st.st_mode & _WRITABLE:
                    return _stat_problem(f"{directory}/{entry.name}", st, owners, sticky_ok=False)
                elif stat.S_ISDIR(st.st_mode):
                    pending.append(f"{directory}/{entry.name}")
    finally:
        os.close(fd)
    return None


def first_problem(paths: list[str], trees: list[str], *, owners: frozenset[int] | None = None) -> str | None:
    """The first of ``paths`` (:func:`path_problem`) and ``trees`` (:func:`tree_problem`) with a problem.

    One memo of directories for all: the paths of one Python share most of their parents.
    """
    seen: dict[str, str] = {}
    for path in paths:
        problem = path_problem(path, owners=owners, seen=seen)
        if problem is not None:
            return problem
    for tree in trees:
        problem = tree_problem(tree, owners=owners, seen=seen)
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
        self._seen: dict[str, str] = {}
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
        return _stat_problem(path, st, self._owners, sticky_ok=False) or self._directory_problem(
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


def fd_problem(fd: int, name: str, *, owners: frozenset[int] | None = None) -> str | None:
    """The same test for an open file or directory (``fstat``): its owner and mode, nothing above it."""
    owners = owners if owners is not None else owners_of_trust()
    st = os.fstat(fd)
    if st.st_uid not in owners:
        return f"{name}: owned by uid {st.st_uid}, not root"
    if st.st_mode & _WRITABLE:
        return f"{name}: writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
