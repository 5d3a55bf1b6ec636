"""Whether a path is root's alone: nobody but root (or the user running us) could change what it names.

cdictk runs as root and reads files that decide what runs as root: CDI specs (their hooks end up in
``config.json``), the Python it is launched with and its import path, its parse cache. Such a file is
only as safe as every name on the way to it, so the check walks the path the way the kernel resolves
it (:class:`Walk`): from ``/``, one name at a time; a symlink is judged, then where it leads is walked
the same way, name by name (so are the directories between one link and the next); ``..`` goes up
from where the walk is once the links before it are followed, not by the text of the path.

- every entry must belong to root or to the reading user (``owners``);
- the file itself (or the directory, when it is what we read or write into) must not be writable by
  group or others;
- a directory on the way may be writable by others only with the sticky bit (``/tmp``): there the
  kernel lets nobody but an entry's owner rename or remove it, so root's entries stay root's;
- a symlink owned by root is followed (its own mode means nothing, and only its owner could have
  made it point elsewhere).

Nothing here opens a file: a path that passes cannot be changed by anyone but root afterwards, so
opening it later reads what was checked. Standard library only (``errno``, ``os``, ``stat``, ``sys``),
and no cdictk import: a launcher runs this module's code, copied beside it as ``cdictk_trust.py``,
before it trusts anything of cdictk (:mod:`cdictk.runtime.startcheck`); so it holds what a start
needs and nothing else, and the checks made off the start path (a whole package tree, the repairs)
are in :mod:`cdictk.trustscan`. :mod:`cdictk.startpath.helpers.hostpaths` walks a spec's host paths with
:class:`Walk` and a rule of its own.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    # A directory (as written) that passed as a directory on the way -> where the walk resolved it.
    Seen = dict[str, str]

WRITABLE = 0o022  # group or others
MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup


class Walk:
    """Walks a path as the kernel resolves it, and asks :meth:`judge` about each entry on the way.

    From ``/``, one name at a time: each entry is looked at with ``lstat`` and judged; a symlink's
    target is walked next, name by name, from ``/`` or from the link's directory; ``..`` leaves the
    directory the walk is in, where the links before it led. The first answer that is not None ends
    the walk. A name that cannot be looked at (missing, or under a file) is :meth:`missing`'s to
    judge. A subclass says what passes; a walk reused for many paths looks at each entry once
    (``lstat`` answers are kept) and starts a path in a directory that passed already from where it
    resolved (``seen``: may be shared between walks of one rule).
    """

    __slots__ = ("_dirs", "_entries")

    def __init__(self, seen: Seen | None = None) -> None:
        self._dirs: Seen = {} if seen is None else seen
        self._entries: dict[str, os.stat_result | OSError] = {}

    def judge(self, path: str, st: os.stat_result, leaf: bool) -> str | None:
        """Why the entry at ``path`` (resolved: no link on its way) does not pass, or None.
        ``leaf``: the walk's last entry, which the path names (a link there is followed after)."""
        raise NotImplementedError

    def missing(self, path: str, error: OSError, parent: str) -> str | None:
        """What a name that cannot be looked at means (``error``: from ``lstat``; ``parent``: where
        the walk is, which passed: "" for ``/``)."""
        return f"{path}: {error.strerror}"

    def walk(self, path: str, *, follow: bool = True) -> str | None:
        """The first problem on the way to absolute ``path``, or None. ``follow=False``: a symlink at
        ``path`` is judged, not followed."""
        parent, _, name = path.rpartition("/")
        # Only a path without ".", ".." and "//" names what its text says: its directory can be remembered.
        plain = name not in ("", ".", "..") and "/./" not in path and "/../" not in path and "//" not in path
        if plain and parent in self._dirs:  # the files of one directory: its walk is done once
            pending, where = [name], self._dirs[parent]
        else:
            pending = [part for part in reversed(path.split("/")) if part not in ("", ".")]
            top = self._lstat("/")
            problem = f"/: {top.strerror}" if isinstance(top, OSError) else self.judge("/", top, not pending)
            if problem is not None:
                return problem
            where = ""  # the entries resolved so far, as a path ("" is /)
        links = 0
        while pending:
            part = pending.pop()
            if not pending and plain:
                # The bottom of the stack is the path's own last name (links push above it): what is
                # resolved now is its directory, which passed.
                self._dirs[parent] = where
            if part == "..":
                if not stat.S_ISDIR(self._mode(where)):  # the kernel's ENOTDIR: nothing above a file
                    return self.missing(f"{where}/..", _not_a_directory(), where)
                where = where.rpartition("/")[0]
                continue
            current = f"{where}/{part}"
            st = self._lstat(current)
            if isinstance(st, OSError):
                return self.missing(current, st, where)
            leaf = not pending
            problem = self.judge(current, st, leaf)
            if problem is not None:
                return problem
            if stat.S_ISLNK(st.st_mode):
                if leaf and not follow:
                    return None
                links += 1
                if links > MAX_LINKS:
                    return f"{path}: too many levels of symbolic links"
                try:
                    target = os.readlink(current)
                except OSError as exc:
                    return f"{current}: {exc.strerror}"
                if target.startswith("/"):
                    where = ""
                pending += [part for part in reversed(target.split("/")) if part not in ("", ".")]
                continue
            where = current
        if plain and follow and stat.S_ISDIR(self._mode(where)):
            self._dirs[path] = where  # a directory that passed: as a directory on the way it would too
        return None

    def _mode(self, path: str) -> int:
        """The mode of an entry the walk passed ("" is /); 0 if it cannot be looked at now."""
        st = self._lstat(path or "/")
        return 0 if isinstance(st, OSError) else st.st_mode

    def _lstat(self, path: str) -> os.stat_result | OSError:
        found = self._entries.get(path)
        if found is None:
            try:
                found = os.lstat(path)
            except OSError as exc:
                found = exc
            self._entries[path] = found
        return found


def _not_a_directory() -> OSError:
    return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))


class TrustWalk(Walk):
    """The rule above: ``owners`` own every entry; ``leaf_sticky_ok``: the path is a directory we only
    look names up in (the parent of something to be made), so a sticky world-writable one passes."""

    __slots__ = ("leaf_sticky_ok", "owners")

    def __init__(
        self, owners: frozenset[int], *, leaf_sticky_ok: bool = False, seen: Seen | None = None
    ) -> None:
        super().__init__(seen)
        self.owners = owners
        self.leaf_sticky_ok = leaf_sticky_ok

    def judge(self, path: str, st: os.stat_result, leaf: bool) -> str | None:
        return stat_problem(path, st, self.owners, sticky_ok=self.leaf_sticky_ok or not leaf)


def owners_of_trust() -> frozenset[int]:
    """Root, and the user running us (a rootless setup trusts its own files)."""
    return frozenset({0, os.geteuid()})


def absolute(path: str) -> str:
    """``path`` from ``/``: a relative one from the working directory, its ``..`` left for the walk."""
    return path if path.startswith("/") else f"{os.getcwd()}/{path}"


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
    return TrustWalk(owners, leaf_sticky_ok=leaf_sticky_ok, seen=seen).walk(absolute(path))


def stat_problem(path: str, st: os.stat_result, owners: frozenset[int], *, sticky_ok: bool) -> str | None:
    if st.st_uid not in owners:
        return f"{path}: owned by uid {st.st_uid}, not root"
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & WRITABLE:
        return None
    if sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return None
    return f"{path}: writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"


def paths_problem(paths: list[str], *, owners: frozenset[int] | None = None) -> str | None:
    """The first of ``paths`` that is not root's alone (:func:`path_problem`), or None; one walk for
    all, since the paths of one Python share most of their parents."""
    check = TrustWalk(owners if owners is not None else owners_of_trust())
    for path in paths:
        problem = check.walk(absolute(path))
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
