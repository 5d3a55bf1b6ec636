"""Which files of a CDI spec directory are specs: ``*.json`` and ``*.yaml``, lexical order, no recursion.

Only specs that root alone could have written: a spec's hooks become hooks of the container that the
runtime runs as root, so a spec file, its directory and everything on the way to them (along the
names and where symlinks lead) must belong to root (or to the reading user) and be writable by nobody
else (:mod:`cdictk.startpath.trust`). Anything else is skipped with a problem that names it and why; the CDI
reference library does no such check. ``trusted_only=False`` (``accept-untrusted-specs``) is for
rootless and test setups.

A file system whose owners and contents a daemon reports is trusted only when root runs the daemon:
a FUSE mount's ``user_id=`` (mountinfo) must be 0. Another user's FUSE mount (``allow_other``) can
claim root's ownership and hand out one text to the check and another to the read. The mounts are
looked up where the spec files are parsed (``mounts``: :class:`cdictk.cdi.fusemounts.FuseMounts`, which
the caller passes, so that this module imports nothing of the slow path); the runtime shim's warm start
instead keys its stored index on each spec dir's and file's device (:mod:`cdictk.startpath.specs.index`),
so a mount made since is a miss, checked then.

Its own module so that the runtime shim can list the spec dirs (to check its stored index) without
importing the spec loader. Standard library only.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.errors import Problem
from cdictk.startpath.trust import path_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from cdictk.startpath.trust import Seen

    class FuseCheck(Protocol):
        """What :class:`cdictk.cdi.fusemounts.FuseMounts` answers: why ``path`` is on a FUSE file
        system whose daemon is not root's, or None."""

        def problem(self, path: str) -> str | None: ...


SPEC_SUFFIXES = (".json", ".yaml")
MAX_SPEC_BYTES = 8 << 20  # a spec file larger than this is refused
UNTRUSTED = "not trusted, skipped"  # how a problem of trust starts


def spec_paths(
    directory: str,
    problems: list[Problem],
    *,
    require_dirs: bool = False,
    trusted_only: bool = True,
    mounts: FuseCheck | None,
) -> list[str]:
    """The spec files of ``directory`` in lexical order; a directory's problem goes to ``problems``,
    and so does each file skipped for trust. ``mounts``: the FUSE check too (see above); required, so
    that no caller that parses specs goes without it unawares (None: the index's snapshot alone). Paths
    and problems name the directory in one spelling (``/etc/cdi//`` is ``/etc/cdi``)."""
    directory = os.path.normpath(directory)
    try:
        with os.scandir(directory) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if entry.name.endswith(SPEC_SUFFIXES) and not entry.is_dir(follow_symlinks=False)
            )
    except FileNotFoundError:
        if require_dirs:
            problems.append(Problem(directory, "", "no such spec directory"))
        return []
    except OSError as exc:
        problems.append(Problem(directory, "", f"cannot read spec directory: {exc.strerror}"))
        return []
    paths = [os.path.join(directory, name) for name in names]
    if not trusted_only or not paths:
        return paths
    seen: Seen = {}
    why = path_problem(directory, seen=seen) or (mounts.problem(directory) if mounts is not None else None)
    if why is not None:
        problems.append(Problem(directory, "", f"{UNTRUSTED}: {why}"))
        return []
    trusted = []
    for path in paths:
        why = path_problem(path, seen=seen) or (mounts.problem(path) if mounts is not None else None)
        if why is None:
            trusted.append(path)
        else:
            problems.append(Problem(path, "", f"{UNTRUSTED}: {why}"))
    return trusted


def untrusted(problem: Problem) -> bool:
    """Whether ``problem`` is a spec file or directory skipped for trust."""
    return problem.reason.startswith(UNTRUSTED)
