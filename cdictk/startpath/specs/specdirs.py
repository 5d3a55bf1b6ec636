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
looked up where the spec files are parsed (``filesystems``); the runtime shim's warm start instead
keys its stored index on each spec dir's and file's device (:mod:`cdictk.startpath.specs.index`), so a mount
made since is a miss, checked then.

Its own module so that the runtime shim can list the spec dirs (to check its stored index) without
importing the spec loader. Standard library only.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.errors import Problem
from cdictk.startpath.trust import path_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.startpath.trust import Seen

SPEC_SUFFIXES = (".json", ".yaml")
MAX_SPEC_BYTES = 8 << 20  # a spec file larger than this is refused
UNTRUSTED = "not trusted, skipped"  # how a problem of trust starts


def spec_paths(
    directory: str,
    problems: list[Problem],
    *,
    require_dirs: bool = False,
    trusted_only: bool = True,
    filesystems: bool = True,
) -> list[str]:
    """The spec files of ``directory`` in lexical order; a directory's problem goes to ``problems``,
    and so does each file skipped for trust. ``filesystems``: the FUSE check too (see above). Paths
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
    mounts = _Mounts() if filesystems else None
    why = path_problem(directory, seen=seen) or (mounts.problem(directory) if mounts else None)
    if why is not None:
        problems.append(Problem(directory, "", f"{UNTRUSTED}: {why}"))
        return []
    trusted = []
    for path in paths:
        why = path_problem(path, seen=seen) or (mounts.problem(path) if mounts else None)
        if why is None:
            trusted.append(path)
        else:
            problems.append(Problem(path, "", f"{UNTRUSTED}: {why}"))
    return trusted


def untrusted(problem: Problem) -> bool:
    """Whether ``problem`` is a spec file or directory skipped for trust."""
    return problem.reason.startswith(UNTRUSTED)


class _Mounts:
    """The FUSE mounts of this process's mount table, read when first asked.

    Fails closed: a spec whose file system cannot be told (the file cannot be looked at, the mount
    table cannot be read or parsed) is a problem, not a pass."""

    def __init__(self) -> None:
        # device -> (fstype, the daemon's uid); or why the table could not be read
        self._fuse: dict[int, tuple[str, str]] | str | None = None

    def problem(self, path: str) -> str | None:
        """Why ``path`` (followed) is on a FUSE file system whose daemon is not root's, or may be."""
        try:
            device = os.stat(path).st_dev
        except OSError as exc:
            return f"{path}: {exc.strerror}: cannot tell which file system it is on"
        if self._fuse is None:
            self._fuse = _fuse_mounts()
        if isinstance(self._fuse, str):
            return f"{path}: cannot tell whether a FUSE daemon serves it: {self._fuse}"
        found = self._fuse.get(device)
        if found is None or found[1] == "0":
            return None
        fstype, owner = found
        return (
            f"{path}: on a {fstype} file system mounted by uid {owner}: its daemon reports the owners "
            "and the contents"
        )


def _fuse_mounts() -> dict[int, tuple[str, str]] | str:
    """The FUSE mounts by device, or why the mount table could not be read."""
    from cdictk.startpath.helpers import mountinfo  # noqa: PLC0415 - only where the spec files are parsed

    try:
        fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"/proc/self/mountinfo: {exc.strerror}"
    try:
        mounts = mountinfo.read(fd)
    except OSError as exc:
        return f"/proc/self/mountinfo: {exc.strerror}"
    except ValueError as exc:
        return str(exc)
    finally:
        os.close(fd)
    fuse: dict[int, tuple[str, str]] = {}
    for mount in mounts:
        if mount.fstype == "fuse" or mount.fstype.startswith(("fuse.", "fuseblk")):
            options = dict(option.partition("=")[::2] for option in mount.super_options.split(","))
            fuse[mount.dev] = (mount.fstype, options.get("user_id", "unknown"))
    return fuse
