"""Start path: standard library only.

Whether a host path a CDI spec mounts, or a device node it names, is root's alone.

A spec's mounts are bind mounts the runtime makes as root, and it follows every symlink on the way
to the source. Whoever can change a directory on that way (make ``/tmp/nvidia-mps``, then swap it for
a link to ``/etc``) picks what root mounts read-write into every GPU container. So a host path is
used only when, along the way the kernel walks it (each name, and where each symlink leads):

- every entry belongs to root or to a system account: a uid below the node's login range
  (``UID_MIN`` of ``/etc/login.defs``, 1000 by default), such as the ``nvidia-persistenced`` user that
  owns ``/run/nvidia-persistenced`` on Debian and Ubuntu; and the user running cdictk, when not root;
- every directory on the way is writable by its owner alone, except a sticky one (``/tmp``), where
  the kernel lets nobody but an entry's owner rename or remove it: it counts only for an entry of
  such an owner, which the rule checks next;
- the file or directory mounted is writable by its owner alone (sockets, FIFOs and device nodes
  excepted: their mode lets nobody replace them);
- at container start (``root_links``), every symlink on the way is root's own: ``cdictk cdi
  generate`` writes host paths resolved inside the driver root, so a link a system account made
  there since is refused, not followed.

A path that is missing is not judged here: nobody but the owners above could create it, and the
runtime says so when it mounts. Standard library only, and no :mod:`typing`: the runtime shim and
the precreate hook check every mount of a container's spec with it.
"""

from __future__ import annotations

import os
import stat

LOGIN_DEFS = "/etc/login.defs"
DEFAULT_UID_MIN = 1000  # login.defs' own default
WRITABLE = 0o022  # group or others
_MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup
_MAX_LOGIN_DEFS = 1 << 20
_SPECIAL = (stat.S_IFSOCK, stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK)


def login_uid_min(login_defs: str = LOGIN_DEFS) -> int:
    """The first uid of the login range (``UID_MIN``); 1000 when the file or the key is missing."""
    try:
        with open(login_defs, "rb") as file:
            text = file.read(_MAX_LOGIN_DEFS).decode("utf-8", "replace")
    except OSError:
        return DEFAULT_UID_MIN
    value = DEFAULT_UID_MIN
    at = text.find("UID_MIN")
    while at >= 0:  # the key's lines alone: the file is 400 lines of comments, read on every start
        end = text.find("\n", at)
        words = text[at : end if end >= 0 else len(text)].split()
        if (
            (at == 0 or text[at - 1] == "\n")
            and len(words) >= 2
            and words[0] == "UID_MIN"
            and words[1].isdigit()
        ):
            value = int(words[1])
        at = text.find("UID_MIN", at + 7)
    return max(1, min(value, DEFAULT_UID_MIN * 60))


class HostPathCheck:
    """The rule above for many paths; the entries they share are looked at once.

    ``root_links``: a symlink on the way must be root's (uid 0), not only a system account's: the
    check made where a container starts. ``uid_min``: the login range's first uid (default: from
    ``login_defs``). Answers are memoised: use one for one spec or one container start.
    """

    __slots__ = ("_dirs", "_entries", "_euid", "_root_links", "_uid_min")

    def __init__(
        self, *, root_links: bool = False, uid_min: int | None = None, login_defs: str = LOGIN_DEFS
    ) -> None:
        self._root_links = root_links
        self._uid_min = login_uid_min(login_defs) if uid_min is None else uid_min
        self._euid = os.geteuid()
        self._entries: dict[str, os.stat_result | None] = {}
        self._dirs: dict[str, str] = {}  # a directory (as written) that passed -> where it resolved

    def trusts(self, uid: int) -> bool:
        """Whether ``uid`` is root, a system account or the user running us."""
        return uid < self._uid_min or uid == self._euid

    def problem(self, path: str, *, follow: bool = True) -> str | None:
        """Why ``path`` is not root's alone ("/tmp/nvidia-mps: owned by uid 1000, ..."), or None.

        ``follow=False``: a symlink at ``path`` is judged itself (owner, directories above), not where
        it leads: a link followed inside a driver root, whose target the caller resolved there."""
        if not path.startswith("/") or "\0" in path:
            return f"{path}: not an absolute path"
        parent, _, name = path.rpartition("/")
        plain = name not in ("", ".", "..") and os.path.normpath(path) == path
        if plain and parent in self._dirs:  # the libraries of one directory: its walk is done once
            pending, where = [name], self._dirs[parent]
        else:
            problem = self._judge("/", self._lstat("/"), leaf=False)
            if problem is not None:
                return problem
            pending = [part for part in reversed(path.split("/")) if part not in ("", ".")]
            where = ""  # the entries resolved so far, as a path ("" is /)
        links = 0
        while pending:
            part = pending.pop()
            if not pending and plain:
                # The bottom of the stack is the path's own last name (links push above it): what is
                # resolved now is its directory, which passed.
                self._dirs.setdefault(parent, where)
            if part == "..":
                where = where.rpartition("/")[0]
                continue
            current = f"{where}/{part}"
            st = self._lstat(current)
            if st is None:
                return None  # missing: see the module's docstring
            leaf = not pending
            problem = self._judge(current, st, leaf=leaf)
            if problem is not None:
                return problem
            if stat.S_ISLNK(st.st_mode):
                if leaf and not follow:
                    return None
                links += 1
                if links > _MAX_LINKS:
                    return f"{path}: too many levels of symbolic links"
                try:
                    target = os.readlink(current)
                except OSError as exc:
                    return f"{current}: {exc.strerror}"
                if target.startswith("/"):
                    where = ""
                pending += [p for p in reversed(target.split("/")) if p not in ("", ".")]
                continue
            if not leaf and not stat.S_ISDIR(st.st_mode):
                return None  # ENOTDIR: nothing there to mount
            where = current
        return None

    def _lstat(self, path: str) -> os.stat_result | None:
        if path not in self._entries:
            try:
                self._entries[path] = os.lstat(path)
            except OSError:
                self._entries[path] = None
        return self._entries[path]

    def _judge(self, path: str, st: os.stat_result | None, *, leaf: bool) -> str | None:
        if st is None:
            return None
        if not self.trusts(st.st_uid):
            return f"{path}: owned by uid {st.st_uid}, not root or a system account (below {self._uid_min})"
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            if self._root_links and st.st_uid != 0:
                return (
                    f"{path}: a symlink of uid {st.st_uid}, not root's: made since the spec was written, "
                    "it is not followed"
                )
            return None
        if not mode & WRITABLE or stat.S_IFMT(mode) in _SPECIAL:
            return None
        if not leaf and stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
            return None  # sticky: only the entry's owner may rename or remove it, and it is checked next
        return f"{path}: writable by group or others (mode {stat.S_IMODE(mode):04o})"
