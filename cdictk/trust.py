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
was checked. Standard library only, and no cdictk import: it must be usable before anything else of
cdictk is trusted (a launcher checks its import path with it).
"""

from __future__ import annotations

import os
import stat

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


def fd_problem(fd: int, name: str, *, owners: frozenset[int] | None = None) -> str | None:
    """The same test for an open file or directory (``fstat``): its owner and mode, nothing above it."""
    owners = owners if owners is not None else owners_of_trust()
    st = os.fstat(fd)
    if st.st_uid not in owners:
        return f"{name}: owned by uid {st.st_uid}, not root"
    if st.st_mode & _WRITABLE:
        return f"{name}: writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
