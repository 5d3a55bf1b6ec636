"""What the generator and the node runtime read from an ELF file: a library's SONAME, and what the
dynamic loader needs to load a program or library (``DT_NEEDED``, its run paths, ``PT_INTERP``, the
machine: the node runtime's closure of shared libraries).

The same bounded ``os.pread`` reading as the hooks' :mod:`cdictk.startpath.helpers.elfdso` (little-endian
ELF only, offsets checked against the file's size and fixed caps), which a container start needs and
these readers do not.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from cdictk.startpath.helpers.elfdso import (
    DT_NEEDED,
    DT_RPATH,
    DT_RUNPATH,
    DT_STRTAB,
    ET_DYN,
    MIN_SIZE,
    PT_INTERP,
    arch_flags,
    dynamic_entries,
    dynamic_names,
    elf_header,
    file_offset,
    segments_of,
    string_at,
)

_ET_EXEC = 2
_MAX_NEEDED = 256


@dataclass(frozen=True, slots=True)
class Links:
    """What the dynamic loader reads to load an ELF program or shared object: its ``DT_NEEDED`` names in
    order, its ``DT_RUNPATH`` and ``DT_RPATH`` (each a ``:``-separated list, ``$ORIGIN`` unexpanded),
    its ``PT_INTERP`` (programs), and ``arch``: the architecture bits of ldconfig's flags for its
    machine and class (:data:`FLAG_X8664_LIB64`...), None for a machine ldconfig does not know."""

    arch: int | None
    needed: tuple[bytes, ...]
    runpath: bytes | None
    rpath: bytes | None
    interpreter: bytes | None


def read_links(path: str, max_size: int = 1 << 30) -> Links | None:
    """:class:`Links` of the little-endian ELF program or shared object at ``path`` (a regular file of
    at most ``max_size`` bytes); None for anything else, or one whose headers do not fit the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not MIN_SIZE <= info.st_size <= max_size:
            return None
        return _links(fd, info.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _links(fd: int, size: int) -> Links | None:
    header = elf_header(fd)
    if header is None:
        return None
    is64, e_type, machine, e_flags, headers = header
    if e_type not in (ET_DYN, _ET_EXEC):
        return None
    segments = segments_of(fd, size, is64, headers)
    if segments is None:
        return None
    interpreter = next(
        (string_at(fd, offset) for kind, offset, _, _, _ in segments if kind == PT_INTERP and offset < size),
        None,
    )
    arch = arch_flags(machine, is64, e_flags)
    dynamic = dynamic_entries(fd, size, is64, segments)
    if dynamic is None:  # a static program: nothing to load
        return Links(arch, (), None, None, interpreter)
    tags, values = dynamic
    if DT_STRTAB not in tags:
        return None
    strtab = file_offset(segments, values[tags.index(DT_STRTAB)])

    def string(value: int) -> bytes | None:
        return string_at(fd, strtab + value) if 0 <= strtab + value < size else None

    needed = [string(value) for tag, value in zip(tags, values, strict=True) if tag == DT_NEEDED]
    if len(needed) > _MAX_NEEDED or None in needed:
        return None
    runpath = string(values[tags.index(DT_RUNPATH)]) if DT_RUNPATH in tags else None
    rpath = string(values[tags.index(DT_RPATH)]) if DT_RPATH in tags else None
    return Links(arch, tuple(name for name in needed if name is not None), runpath, rpath, interpreter)


def read_soname(path: str, max_size: int = 1 << 30) -> str | None:
    """The SONAME of the ELF shared object at ``path`` (a file of at most ``max_size`` bytes); None when
    it has none or is not a readable little-endian ELF file, or the name is not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not MIN_SIZE <= info.st_size <= max_size:
            return None
        header = elf_header(fd)
        if header is None:
            return None
        is64, _, _, _, headers = header
        segments = segments_of(fd, info.st_size, is64, headers)
        found = None if segments is None else dynamic_names(fd, info.st_size, is64, segments, classify=False)
        return None if found is None or found[0] is None else found[0].decode()
    except (OSError, ValueError):  # UnicodeDecodeError among them
        return None
    finally:
        os.close(fd)
