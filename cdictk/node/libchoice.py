"""Which file cdictk loads for a library's SONAME, and whether it may load it at all.

cdictk loads the driver's NVML into processes of root's: discovery's NVML child (``cdictk cdi
generate``, ``info``, the shim's spec made in memory), the device plugin's NVML child and the legacy
prestart hook's requirement check. Loading a library runs its constructors, so the file decides what
root runs. The file is the one the dynamic loader would take for the SONAME (glibc's ``dl-cache.c``):

- the first entry of the driver root's ``/etc/ld.so.cache`` with that name and the cache flags this
  process's loader takes (its ABI: x86-64, not i386 or x32), in the cache's order; an entry with a
  hwcap word (a ``glibc-hwcaps/x86-64-v3`` or older hwcap subdirectory) is passed over, since the
  loader takes it only on a CPU that has what it names, and the plain one on every other;
- where the cache has no such entry, or its file is gone (a driver tree of its own, GKE's
  ``/usr/local/nvidia``, has no cache), the first of the usual library directories
  (:data:`USUAL_LIB_DIRS`) that holds the name, as the loader searches its default directories after
  the cache.

Never the name looked for in each directory the cache lists: ``ld.so.conf`` may name a directory a
user can write (an application's ``lib``), and a file put there after ``ldconfig`` ran is one the
loader never takes (the cache names another) and such a scan would.

That file is loaded only when it is root's alone by the rule for hook programs
(:class:`cdictk.startpath.helpers.hostpaths.HostPathCheck` with ``programs``): a regular file, and it, every
directory on the way the kernel walks to it, each link followed to it inside the driver root (judged where it
is, then where it leads) belong to root (or to the user running cdictk, when not root) and are
writable by their owner alone (a sticky directory counts for root's entries). Otherwise
:class:`LibraryError` says why in one line and nothing is loaded: not a later entry, not another
directory. The libraries a library opens by name through the loader (``opens``: WSL2's NVML opens
``libdxcore.so``) are chosen and judged the same way, and a refusal of one is a refusal of the
library.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

from cdictk.node.ldcachereader import LdCacheError, read_ld_cache
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.hostpaths import HostPathCheck
from cdictk.startpath.helpers.roots import join, resolve

LD_CACHE = "/etc/ld.so.cache"
# Looked in after the cache (here, and for the driver's libraries in cdictk.node.libraries): a
# missing or corrupt cache still finds the driver. Not /usr/lib: on Fedora and RHEL it holds the
# 32-bit driver (a distribution whose 64-bit libraries live there lists them in its cache, as 64-bit
# entries). Fixed directories an installer makes, none a node's ld.so.conf chose.
USUAL_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/local/nvidia/lib64",  # GKE's driver tree, which the host's ld.so.cache does not list
)
# glibc's _DL_CACHE_DEFAULT_ID by (the kernel's machine, the process's width): the one flags word (ELF
# libc6 and ldconfig's arch) its loader takes from the cache. A 32-bit process on a 64-bit kernel
# is i386 or ARM hard-float, the ABIs NVIDIA built 32-bit drivers for.
_ABI_FLAGS = {
    ("x86_64", 64): 0x0303,
    ("x86_64", 32): 0x0003,
    ("i686", 32): 0x0003,
    ("i386", 32): 0x0003,
    ("aarch64", 64): 0x0A03,
    ("aarch64", 32): 0x0903,
    ("armv8l", 32): 0x0903,
    ("armv7l", 32): 0x0903,
    ("ppc64le", 64): 0x0503,
    ("ppc64", 64): 0x0503,
    ("s390x", 64): 0x0403,
}


class LibraryError(CdictkError):
    """No library to load: none found (``refused`` False), or the one the loader would take is not
    root's alone (``refused``). The message is one line, naming the SONAME when one was asked for."""

    def __init__(self, reason: str, *, soname: str = "", refused: bool = False) -> None:
        super().__init__(soname, "", reason)
        self.soname = soname
        self.refused = refused


def process_abi() -> int | None:
    """The cache flags this process's loader takes; None for a machine not in the table."""
    return _ABI_FLAGS.get((os.uname().machine, 64 if sys.maxsize > 1 << 32 else 32))


def library_path(
    driver_root: str, soname: str, *, opens: tuple[str, ...] = (), abi: int | None = None
) -> str:
    """The host path of the file to load for ``soname`` (links resolved inside ``driver_root``), as
    the module's docstring says; :class:`LibraryError` when there is none, or it or a library of
    ``opens`` that the node has is not root's alone. ``abi``: the cache flags to take (default: this
    process's)."""
    abi = _abi(abi, soname)
    check = HostPathCheck(programs=True)
    path = _chosen(driver_root, soname, abi, check)
    judge_opened(driver_root, soname, opens, abi=abi, check=check)
    return path


def judge_opened(
    driver_root: str,
    soname: str,
    opens: tuple[str, ...],
    *,
    abi: int | None = None,
    check: HostPathCheck | None = None,
) -> None:
    """:class:`LibraryError` for ``soname`` when a library of ``opens`` (which it opens by name) that
    ``driver_root`` has would be loaded and is not root's alone; one it lacks is no problem."""
    abi = _abi(abi, soname)
    for other in opens:
        try:
            _chosen(driver_root, other, abi, check or HostPathCheck(programs=True))
        except LibraryError as exc:
            if exc.refused:
                reason = f"{other}, which it opens: {exc.problem.reason}"
                raise LibraryError(reason, soname=soname, refused=True) from None


def loadable(path: str, check: HostPathCheck | None = None) -> str:
    """``path`` when it may be loaded: a regular file (where its links lead) that is root's alone on
    the way the kernel walks to it; :class:`LibraryError` otherwise."""
    if not path.startswith("/"):  # a bare name is the loader's to search for (LD_LIBRARY_PATH first)
        raise LibraryError(f"{path}: not an absolute path", refused=True)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise LibraryError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise LibraryError(f"{path}: not a regular file", refused=True)
    problem = (check or HostPathCheck(programs=True)).problem(path)
    if problem is not None:
        raise LibraryError(_refusal(problem), refused=True)
    return path


def load(path: str) -> ctypes.CDLL:
    """The library at ``path``, loaded once :func:`loadable` passed it: the one place cdictk loads a
    library file. LibraryError, or OSError from the loader."""
    return ctypes.CDLL(loadable(path))


def _abi(abi: int | None, soname: str) -> int:
    if abi is None:
        abi = process_abi()
    if abi is None:
        reason = f"not chosen on {os.uname().machine}: the cache flags its loader takes are unknown"
        raise LibraryError(reason, soname=soname)
    return abi


def _chosen(driver_root: str, soname: str, abi: int, check: HostPathCheck) -> str:
    followed: list[str] = []
    real = None
    for candidate in _candidates(driver_root, soname, abi):
        followed.clear()
        real = resolve(driver_root, candidate, followed)
        if real is not None:
            break
    if real is None:
        where = f"not found under {driver_root} (its ld.so.cache and the usual library directories)"
        raise LibraryError(where, soname=soname)
    for link in followed:  # each link as it lies in the root: its owner chose where the name leads
        problem = check.problem(link, follow=False)
        if problem is not None:
            raise LibraryError(_refusal(problem), soname=soname, refused=True)
    try:
        return loadable(join(driver_root, real), check)
    except LibraryError as exc:
        raise LibraryError(exc.problem.reason, soname=soname, refused=exc.refused) from None


def _candidates(driver_root: str, soname: str, abi: int) -> list[str]:
    """The cache's entry for ``soname`` and ``abi``, then the usual directories' names: where the
    loader looks, in its order (the cache's file gone, it goes on to its default directories)."""
    try:
        entries = read_ld_cache(join(driver_root, LD_CACHE), name=soname)
    except LdCacheError:  # missing or corrupt: the loader goes without it too
        entries = []
    cached = [e.path for e in entries if e.flags == abi and not e.hwcap][:1]
    return cached + [f"{directory}/{soname}" for directory in USUAL_LIB_DIRS]


def _refusal(problem: str) -> str:
    return f"{problem}: not loaded (cdictk would run its code as root)"
