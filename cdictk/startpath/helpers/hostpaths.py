"""Whether a host path a CDI spec mounts, or a device node it names, is root's alone.

A spec's mounts are bind mounts the runtime makes as root, and it follows every symlink on the way
to the source. Whoever can change a directory on that way (make ``/tmp/nvidia-mps``, then swap it for
a link to ``/etc``) picks what root mounts read-write into every GPU container. So a host path is
used only when, along the way the kernel walks it (:class:`cdictk.startpath.trust.Walk`: each name from ``/``,
each symlink judged, then where it leads, name by name; ``..`` from where the links led):

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

A name that is missing passes only where nobody but the owners above could make it: in a directory
writable by its owner alone (the runtime then says it is missing when it mounts). In a directory
that passed only for its sticky bit (``/tmp``) it is a problem: anyone may make the name there, and
what they make (``/tmp/nvidia-mps -> /etc``, made after a reboot emptied ``/tmp``) is what the runtime
follows. So ``cdictk cdi generate`` leaves out a path found and gone before it was checked, and where
a container starts such a mount is refused, never passed on (the runtime would fail on the missing
source anyway, unless someone else made it first). Standard library only, and no :mod:`typing`: the
runtime shim and the precreate hook check every mount of a container's spec with it.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.trust import WRITABLE, Walk

LOGIN_DEFS = "/etc/login.defs"
DEFAULT_UID_MIN = 1000  # login.defs' own default
_MAX_LOGIN_DEFS = 1 << 20
_SPECIAL = (stat.S_IFSOCK, stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK)


def login_uid_min(login_defs: str = LOGIN_DEFS) -> int:
    """The first uid of the login range (``UID_MIN``), read as shadow-utils reads it; 1000 when the
    file or the key is missing, or its value is not a number.

    As shadow's ``getdef.c``: a line may start with spaces or tabs, the name ends at the first space
    or tab, the value is the rest less the blanks around it and a pair of double quotes, the last
    line of a name wins, and the number is ``strtoul``'s with base 0 (``0x3e8`` hex, ``01750``
    octal). Reading it otherwise would make ``useradd``'s users system accounts to us: an indented
    ``  UID_MIN 2000`` skipped left uids 1000-1999 trusted to own host paths.
    """
    try:
        with open(login_defs, "rb") as file:
            text = file.read(_MAX_LOGIN_DEFS).decode("utf-8", "replace")
    except OSError:
        return DEFAULT_UID_MIN
    value: str | None = None
    at = text.find("UID_MIN")
    while at >= 0:  # the key's lines alone: the file is 400 lines of comments, read on every start
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        line = text[at : end if end >= 0 else len(text)]
        if not text[start:at].strip(" \t") and line[7:8] in (" ", "\t"):
            value = line[7:].strip(" \t\r")
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
        at = text.find("UID_MIN", at + 7)
    number = DEFAULT_UID_MIN if value is None else _c_number(value)
    return max(1, min(DEFAULT_UID_MIN if number is None else number, DEFAULT_UID_MIN * 60))


def _c_number(text: str) -> int | None:
    """``text`` as ``strtoul(text, &end, 0)`` takes it whole (ASCII digits; 0x hex, leading-0 octal),
    or None."""
    base, digits = 10, text
    if text[:2] in ("0x", "0X"):
        base, digits = 16, text[2:]
    elif len(text) > 1 and text[0] == "0":
        base, digits = 8, text[1:]
    allowed = "0123456789abcdefABCDEF"[: base + (6 if base == 16 else 0)]
    if not digits or not digits.isascii() or any(c not in allowed for c in digits):
        return None
    return int(digits, base)


class HostPathCheck(Walk):
    """The rule above for many paths; the entries they share are looked at once.

    ``root_links``: a symlink on the way must be root's (uid 0), not only a system account's: the
    check made where a container starts. ``programs``: every entry must be root's (or ours), for the
    hook programs a runtime runs as root: a system account that owned one (a daemon's user, taken over)
    would run its code as root on every container start, where owning a mounted socket gives it no
    more than it has. ``uid_min``: the login range's first uid (default: from ``login_defs``). Answers
    are memoised: use one for one spec or one container start.
    """

    __slots__ = ("_euid", "_root_links", "_uid_min")

    def __init__(
        self,
        *,
        root_links: bool = False,
        programs: bool = False,
        uid_min: int | None = None,
        login_defs: str = LOGIN_DEFS,
    ) -> None:
        super().__init__()
        self._root_links = root_links
        if programs:
            self._uid_min = 1
        else:
            self._uid_min = login_uid_min(login_defs) if uid_min is None else uid_min
        self._euid = os.geteuid()

    def trusts(self, uid: int) -> bool:
        """Whether ``uid`` is root, a system account (not for ``programs``) or the user running us."""
        return uid < self._uid_min or uid == self._euid

    def problem(self, path: str, *, follow: bool = True) -> str | None:
        """Why ``path`` is not root's alone ("/tmp/nvidia-mps: owned by uid 1000, ..."), or None.

        ``follow=False``: a symlink at ``path`` is judged itself (owner, directories above), not where
        it leads: a link followed inside a driver root, whose target the caller resolved there."""
        if not path.startswith("/") or "\0" in path:
            return f"{path}: not an absolute path"
        return self.walk(path, follow=follow)

    def judge(self, path: str, st: os.stat_result, leaf: bool) -> str | None:
        if not self.trusts(st.st_uid):
            if self._uid_min == 1:
                return f"{path}: owned by uid {st.st_uid}, not root"
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

    def missing(self, path: str, error: OSError, parent: str) -> str | None:
        mode = self._mode(parent)
        if stat.S_ISDIR(mode) and mode & WRITABLE:  # it passed as a sticky one: anyone may make the name
            return (
                f"{path}: missing in a directory others can write ({parent or '/'}, mode "
                f"{stat.S_IMODE(mode):04o}): whoever makes it first picks what it is"
            )
        return None  # only the owners above could make it: see the module's docstring
