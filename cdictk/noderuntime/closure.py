"""The shared libraries a set of ELF files needs, found as the image's own loader finds them.

Each object's ``DT_NEEDED`` names (:func:`cdictk.elflinks.read_links`) are looked up as
glibc's loader looks them up with no ``LD_LIBRARY_PATH``: the object's own run path (``$ORIGIN``-relative
entries only: a wheel's vendored ``.libs`` directory, carried with it), the image's ``ld.so.cache``
(:func:`cdictk.node.ldcachereader.read_ld_cache`; never a ``glibc-hwcaps`` entry, which is built for
a CPU level the node may lack) and then the default directories; every library found is read in turn.
No ``ldd``: nothing of the image is run, and the same image gives the same answer on any machine.

The runtime's loader runs with ``--library-path`` its own ``lib/``, which an absolute ``DT_RPATH``
would come before: an object with one (it would load the node's libraries) is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cdictk.elflinks import Links, read_links
from cdictk.node.ldcachereader import FLAG_ARCH_MASK, LdCacheError, read_ld_cache
from cdictk.startpath.helpers.elfdso import FLAG_AARCH64_LIB64, FLAG_X8664_LIB64
from cdictk.startpath.helpers.roots import join, resolve

# The loader's default directories after the cache, per architecture: the multiarch pair Debian and
# Ubuntu use, then the lib64 pair and the plain pair.
_TRIPLETS = {FLAG_X8664_LIB64: "x86_64-linux-gnu", FLAG_AARCH64_LIB64: "aarch64-linux-gnu"}
_GENERIC_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


class ClosureError(Exception):
    """A library cannot be found or an object cannot be read: one line."""


@dataclass(frozen=True, slots=True)
class Closure:
    loader: str  # the interpreter's PT_INTERP, resolved in the root
    loader_name: str  # its file name as PT_INTERP gives it (what the launcher runs, and libc needs)
    libraries: dict[str, str]  # DT_NEEDED name -> the file in the root, for lib/; sorted by name


def closure(
    root: str,
    interpreter: str,
    objects: Iterable[str],
    *,
    carried: Callable[[str], bool],
    extra: Iterable[str] = (),
) -> Closure:
    """The loader and the libraries ``interpreter`` (a program), ``objects`` (extension modules) and the
    libraries ``extra`` names need, recursively, found under ``root`` (the image's ``/``; the paths
    given are paths here). ``carried(path)``: whether a library a run path leads to is copied with its
    object already (then it stays where it is, and is not put in ``lib/``)."""
    program = _links(interpreter)
    if program.interpreter is None:
        raise ClosureError(f"{interpreter}: no PT_INTERP: not a dynamically linked program")
    arch = program.arch
    if arch not in _TRIPLETS:
        raise ClosureError(f"{interpreter}: an architecture the runtime is not built for (flags {arch})")
    loader_name = os.path.basename(program.interpreter.decode(errors="surrogateescape"))
    loader = in_root(root, program.interpreter.decode(errors="surrogateescape"))
    if not os.path.isfile(loader):
        raise ClosureError(
            f"{program.interpreter.decode(errors='replace')}: the interpreter's loader is missing"
        )
    cache = _cache(root, arch)
    search = _Search(root, arch, cache)
    found: dict[str, str] = {}
    pending: list[tuple[str, str, Links | None]] = [(interpreter, "", program)]
    pending += [(path, "", None) for path in sorted(objects)]
    pending += [("", name, None) for name in extra]
    seen: set[str] = set()
    while pending:
        path, wanted, links = pending.pop(0)
        if wanted:
            if wanted in found or wanted == loader_name:
                continue
            path = search.library(wanted, None, "the runtime")
            found[wanted] = path
        if path in seen:
            continue
        seen.add(path)
        checked = links or _links(path)
        if checked.arch != arch:
            raise ClosureError(f"{path}: built for another architecture than {interpreter}")
        for name in checked.needed:
            text = name.decode(errors="surrogateescape")
            if text == loader_name or text in found:
                continue
            library = search.library(text, (path, checked), path)
            if not carried(library):
                found[text] = library
            pending.append((library, "", None))
    return Closure(loader, loader_name, dict(sorted(found.items())))


def _links(path: str) -> Links:
    links = read_links(path)
    if links is None:
        raise ClosureError(f"{path}: not a readable ELF program or shared object")
    for value in (links.runpath, links.rpath):
        for entry in _entries(value):
            if not entry.startswith(("$ORIGIN", "${ORIGIN}")):
                raise ClosureError(
                    f"{path}: its run path {entry!r} would load the node's libraries before the runtime's own"
                )
    return links


def _entries(value: bytes | None) -> list[str]:
    return [entry for entry in (value or b"").decode(errors="surrogateescape").split(":") if entry]


def _cache(root: str, arch: int) -> dict[str, str]:
    """Name -> path of the image's ld.so.cache entries of ``arch``, the first of each name, as ld.so
    takes them; a missing cache is an empty one (the default directories are searched anyway)."""
    try:
        entries = read_ld_cache(in_root(root, "/etc/ld.so.cache"))
    except LdCacheError as exc:
        if exc.missing:
            return {}
        raise ClosureError(f"{os.path.join(root, 'etc/ld.so.cache')}: {exc}") from None
    found: dict[str, str] = {}
    for entry in entries:
        if entry.flags & FLAG_ARCH_MASK == arch and "/glibc-hwcaps/" not in entry.path:
            found.setdefault(entry.name, entry.path)
    return found


class _Search:
    def __init__(self, root: str, arch: int, cache: dict[str, str]) -> None:
        self.root = root
        self.arch = arch
        self.cache = cache
        triplet = _TRIPLETS[arch]
        self.defaults = (f"/lib/{triplet}", f"/usr/lib/{triplet}", *_GENERIC_DIRS)

    def library(self, name: str, needer: tuple[str, Links] | None, who: str) -> str:
        """The file ``name`` is, for ``needer`` (its path and links; None: the runtime itself)."""
        if "/" in name:
            raise ClosureError(f"{who}: needs {name!r}, a path rather than a library name")
        candidates: list[str] = []  # each resolved already: a path here
        if needer is not None:
            path, links = needer
            origin = os.path.dirname(path)
            for entry in _entries(links.runpath if links.runpath is not None else links.rpath):
                directory = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
                candidates.append(os.path.realpath(os.path.join(directory, name)))
        if name in self.cache:
            candidates.append(in_root(self.root, self.cache[name]))
        candidates += [in_root(self.root, os.path.join(directory, name)) for directory in self.defaults]
        for candidate in candidates:
            if os.path.isfile(candidate):
                found = read_links(candidate)
                if found is not None and found.arch == self.arch:
                    return candidate
        raise ClosureError(
            f"{name}: not found (needed by {who}) in the image's ld.so.cache or {', '.join(self.defaults)}"
        )


def in_root(root: str, path: str) -> str:
    """``path`` of the image whose ``/`` is ``root``, with every symlink on the way followed inside it
    (an absolute target starts again at ``root``), as a path here; where it cannot be followed (a
    missing component, a loop), ``path`` under ``root`` as written, which then does not exist."""
    inside = resolve(root, path)
    return join(root, path if inside is None else inside)
