"""Start path: standard library only.

A shared object's SONAME, and what ldconfig reads from it: standard library only, no ELF parser.

Read through ``os.pread`` at offsets checked against the file's size and fixed caps: the ELF header,
the program headers, the dynamic entries and one string, never the whole file (a libcuda is 100 MiB).
A file may be anything (the hooks read the image's libraries), and this must never read past it,
allocate much or loop. Little-endian ELF only, the byte order of every platform NVIDIA's driver runs on.

- :func:`read_soname`: the SONAME of a library, any machine (the generator, for the driver's links);
- :func:`read_dso`: what glibc's ``process_file`` keeps: an ELF ``ET_DYN`` of a machine this host's
  ldconfig knows, with the flags it would store (``FLAG_ELF_LIBC6`` and the architecture's bits); None
  for anything ldconfig would skip (the ld cache the hook writes).
"""

from __future__ import annotations

import os
import stat
import struct

FLAG_ELF = 0x0001
FLAG_ELF_LIBC6 = 0x0003
FLAG_X8664_LIB64 = 0x0300
FLAG_X8664_LIBX32 = 0x0800
FLAG_AARCH64_LIB64 = 0x0A00
_ET_DYN = 3
_EM_386, _EM_X86_64, _EM_AARCH64 = 3, 62, 183
_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME = 0, 1, 5, 14
_MIN_SIZE = 64  # ldconfig skips files smaller than an ELF64 header (and a.out's header)
_MAX_PHDRS = 512
_MAX_DYNAMIC = 64 << 10
_MAX_NAME = 4096
# A 32-bit library is libc6's when it needs libc or libm, or names glibc's loader as its interpreter.
_LIBC6_NEEDED = (b"libc.so.6", b"libm.so.6")
_PHDR64 = struct.Struct("<IIQQQQQQ")
_PHDR32 = struct.Struct("<IIIIIIII")
_LIBC6_INTERPRETERS = (b"/lib/ld-linux.so.2", b"/libx32/ld-linux-x32.so.2", b"/lib64/ld-linux-x86-64.so.2")


class Dso:
    """A plain class: dataclasses costs the hook milliseconds of imports on every container start."""

    __slots__ = ("flags", "soname")

    def __init__(self, flags: int, soname: bytes | None) -> None:
        self.flags = flags
        self.soname = soname


def read_dso(fd: int, size: int) -> Dso | None:
    """The shared object's flags and SONAME, or None when ldconfig would not cache it."""
    if size < _MIN_SIZE:
        return None
    header = _header(fd)
    if header is None:
        return None
    is64, e_type, machine, headers = header
    if e_type != _ET_DYN:
        return None
    arch = _arch_flags(machine, is64)
    if arch is None:
        return None
    found = _dynamic(fd, size, is64, headers, classify=not arch)
    if found is None:
        return None
    soname, needs_libc, interpreter = found
    if arch:
        return Dso(arch | FLAG_ELF_LIBC6, soname)
    libc6 = needs_libc or interpreter in _LIBC6_INTERPRETERS
    return Dso(FLAG_ELF_LIBC6 if libc6 else FLAG_ELF, soname)


def read_soname(path: str, max_size: int = 1 << 30) -> str | None:
    """The SONAME of the ELF shared object at ``path`` (a file of at most ``max_size`` bytes); None when
    it has none or is not a readable little-endian ELF file, or the name is not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _MIN_SIZE <= info.st_size <= max_size:
            return None
        header = _header(fd)
        if header is None:
            return None
        is64, _, _, headers = header
        found = _dynamic(fd, info.st_size, is64, headers, classify=False)
        return None if found is None or found[0] is None else found[0].decode()
    except (OSError, ValueError):  # UnicodeDecodeError among them
        return None
    finally:
        os.close(fd)


def _header(fd: int) -> tuple[bool, int, int, tuple[int, int, int]] | None:
    """(64-bit, e_type, e_machine, (phoff, phentsize, phnum)) of a little-endian ELF file, or None."""
    ident = os.pread(fd, 64, 0)
    if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[5] != 1 or ident[4] not in (1, 2):
        return None
    is64 = ident[4] == 2
    if is64 and len(ident) < 64:
        return None
    fields = struct.unpack_from("<HHIQQQIHHH" if is64 else "<HHIIIIIHHH", ident, 16)
    return is64, fields[0], fields[1], (fields[4], fields[8], fields[9])


def _arch_flags(machine: int, is64: bool) -> int | None:
    """The flags' architecture bits (0: a plain 32-bit libc6/ELF library); None for a foreign machine."""
    if machine == _EM_X86_64:
        return FLAG_X8664_LIB64 if is64 else FLAG_X8664_LIBX32
    if machine == _EM_386 and not is64:
        return 0
    if machine == _EM_AARCH64 and is64:
        return FLAG_AARCH64_LIB64
    return None


def _dynamic(
    fd: int, size: int, is64: bool, headers: tuple[int, int, int], *, classify: bool
) -> tuple[bytes | None, bool, bytes | None] | None:
    """(SONAME, needs libc or libm, interpreter) from the program headers (their offset, entry size and
    count) and the dynamic segment; the last two only when ``classify`` (a 32-bit library's type
    depends on them, a 64-bit one's never)."""
    phoff, phentsize, phnum = headers
    phdr = _PHDR64 if is64 else _PHDR32
    if phnum > _MAX_PHDRS or phentsize < phdr.size or phoff + phnum * phentsize > size:
        return None
    table = os.pread(fd, phnum * phentsize, phoff)
    if phentsize == phdr.size:
        rows = list(phdr.iter_unpack(table))
    else:
        rows = [phdr.unpack_from(table, index * phentsize) for index in range(phnum)]
    # (type, offset, vaddr, filesz) whichever the class: the two layouts order their fields apart.
    fields = [(r[0], r[2], r[3], r[5]) if is64 else (r[0], r[1], r[2], r[4]) for r in rows]
    dynamic = next(((offset, filesz) for kind, offset, _, filesz in fields if kind == _PT_DYNAMIC), None)
    if dynamic is None or dynamic[1] == 0 or dynamic[0] >= size:
        return None
    word = 8 if is64 else 4
    raw = os.pread(fd, min(dynamic[1], _MAX_DYNAMIC), dynamic[0])
    words = memoryview(raw[: len(raw) // (2 * word) * 2 * word]).cast("Q" if is64 else "I").tolist()
    tags, values = words[0::2], words[1::2]
    if _DT_NULL in tags:  # the entries end at DT_NULL
        del tags[tags.index(_DT_NULL) :]
    if _DT_STRTAB not in tags:
        return None
    strtab = values[tags.index(_DT_STRTAB)]
    # DT_STRTAB is an address: the loadable segment that maps it gives its place in the file.
    base = next(
        (
            vaddr - offset
            for kind, offset, vaddr, filesz in fields
            if kind == _PT_LOAD and 0 <= strtab - vaddr < filesz
        ),
        0,
    )
    soname = None
    if _DT_SONAME in tags:
        at = strtab - base + values[tags.index(_DT_SONAME)]
        if not 0 <= at < size:
            return None
        soname = _string(fd, at)
    if not classify:
        return soname, False, None
    needs_libc = False
    for tag, value in zip(tags, values, strict=False):
        at = strtab - base + value
        if tag == _DT_NEEDED and 0 <= at < size and _string(fd, at) in _LIBC6_NEEDED:
            needs_libc = True
    interpreter = next(
        (_string(fd, offset) for kind, offset, _, _ in fields if kind == _PT_INTERP and offset < size), None
    )
    return soname, needs_libc, interpreter


def _string(fd: int, offset: int) -> bytes:
    raw = os.pread(fd, _MAX_NAME, offset)
    end = raw.find(b"\0")
    return raw if end < 0 else raw[:end]
