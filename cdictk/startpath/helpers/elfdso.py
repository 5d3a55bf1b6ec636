"""A shared object's SONAME, and what ldconfig reads from it: standard library only, no ELF parser.

Read through ``os.pread`` at offsets checked against the file's size and fixed caps: the ELF header,
the program headers, the dynamic entries and one string, never the whole file (a libcuda is 100 MiB).
A file may be anything (the hooks read the image's libraries), and this must never read past it,
allocate much or loop. Little-endian ELF only (``EI_DATA`` is ``ELFDATA2LSB``), the byte order of every
platform NVIDIA's driver runs on, read as such whatever this host's own order: a big-endian file is
not a library of that driver, and ``read_dso`` answers None for it.

- :func:`read_dso`: what glibc's ``process_file`` keeps: an ELF ``ET_DYN`` of a machine this host's
  ldconfig knows, with the flags it would store (``FLAG_ELF_LIBC6`` and the architecture's bits) and,
  on request, the ``NT_GNU_ABI_TAG`` kernel version that ldconfig 2.35 and older store; None for
  anything ldconfig would skip (the ld cache the hook writes);
- :func:`glibc_minor`: the newest ``GLIBC_2.N`` symbol version a libc defines (the image's glibc
  release, for the hook's ld cache);
- the reading itself (:func:`elf_header`, :func:`segments_of`, :func:`dynamic_entries`...), which
  :mod:`cdictk.elflinks` shares for what only the generator and the node runtime ask (a SONAME, what
  the dynamic loader needs).
"""

from __future__ import annotations

import os
import struct

FLAG_ELF = 0x0001
FLAG_ELF_LIBC6 = 0x0003
FLAG_X8664_LIB64 = 0x0300
FLAG_X8664_LIBX32 = 0x0800
FLAG_AARCH64_LIB64 = 0x0A00
# glibc's sysdeps/generic/ldconfig.h; set by ldconfig's sysdeps/unix/sysv/linux/<arch>/readelflib.c.
FLAG_POWERPC_LIB64 = 0x0500
FLAG_RISCV_FLOAT_ABI_SOFT = 0x0F00
FLAG_RISCV_FLOAT_ABI_DOUBLE = 0x1000
_ELFCLASS32, _ELFCLASS64 = 1, 2
_ELFDATA2LSB = 1
ET_DYN = 3
_EM_386, _EM_X86_64, _EM_AARCH64 = 3, 62, 183
_EM_PPC64, _EM_RISCV = 21, 243
# RISC-V's e_flags: ldconfig keeps a library of the soft or double float ABI that sets no flag but RVC.
_EF_RISCV_RVC, _EF_RISCV_FLOAT_ABI = 0x0001, 0x0006
_RISCV_FLOAT_ABIS = {0x0000: FLAG_RISCV_FLOAT_ABI_SOFT, 0x0004: FLAG_RISCV_FLOAT_ABI_DOUBLE}
_PT_LOAD, _PT_DYNAMIC, PT_INTERP, _PT_NOTE = 1, 2, 3, 4
_DT_NULL, DT_NEEDED, DT_STRTAB, _DT_STRSZ, _DT_SONAME = 0, 1, 5, 10, 14
DT_RPATH, DT_RUNPATH = 15, 29
_DT_VERDEF, _DT_VERDEFNUM = 0x6FFFFFFC, 0x6FFFFFFD
_VERDEF = struct.Struct("<HHHHIII")  # version, flags, ndx, cnt, hash, aux, next: the same in both classes
_MAX_VERDEFS = 512
_MAX_DYNSTR = 1 << 20  # a libc's .dynstr is about 25 KiB
_MAX_NOTES = 64 << 10  # a note segment: a real library's hold a few dozen bytes
MIN_SIZE = 64  # ldconfig skips files smaller than an ELF64 header (and a.out's header)
_HEAD = 1024  # read first: the ELF header, and mostly the program headers and notes after it
_MAX_PHDRS = 512
_MAX_DYNAMIC = 64 << 10
_MAX_NAME = 4096
# A 32-bit library is libc6's when it needs libc or libm, or names glibc's loader as its interpreter.
_LIBC6_NEEDED = (b"libc.so.6", b"libm.so.6")
_PHDR64 = struct.Struct("<IIQQQQQQ")
_PHDR32 = struct.Struct("<IIIIIIII")
_LIBC6_INTERPRETERS = (b"/lib/ld-linux.so.2", b"/libx32/ld-linux-x32.so.2", b"/lib64/ld-linux-x86-64.so.2")
Segment = tuple[int, int, int, int, int]


class Dso:
    """A plain class: dataclasses costs the hook milliseconds of imports on every container start."""

    __slots__ = ("flags", "osversion", "soname")

    def __init__(self, flags: int, soname: bytes | None, osversion: int = 0) -> None:
        self.flags = flags
        self.soname = soname
        self.osversion = (
            osversion  # from the NT_GNU_ABI_TAG note: OS << 24 | major << 16 | minor << 8 | patch
        )


def read_dso(fd: int, size: int, *, abi_tag: bool = False) -> Dso | None:
    """The shared object's flags and SONAME, or None when ldconfig would not cache it; with ``abi_tag``,
    its ABI note's kernel version as ldconfig 2.35 and older read it (0 without one)."""
    if size < MIN_SIZE:
        return None
    header = elf_header(fd)
    if header is None:
        return None
    is64, e_type, machine, e_flags, headers = header
    if e_type != ET_DYN:
        return None
    arch = arch_flags(machine, is64, e_flags)
    if arch is None:
        return None
    segments = segments_of(fd, size, is64, headers)
    if segments is None:
        return None
    found = dynamic_names(fd, size, is64, segments, classify=not arch)
    if found is None:
        return None
    soname, needs_libc, interpreter = found
    osversion = _abi_tag(fd, size, is64, segments, headers[3]) if abi_tag else 0
    if arch:
        return Dso(arch | FLAG_ELF_LIBC6, soname, osversion)
    libc6 = needs_libc or interpreter in _LIBC6_INTERPRETERS
    return Dso(FLAG_ELF_LIBC6 if libc6 else FLAG_ELF, soname, osversion)


def glibc_minor(fd: int, size: int) -> int | None:
    """N of the newest ``GLIBC_2.N`` version the shared object defines (a libc's own release, or the
    last one that added a symbol); None for a file that defines none or cannot be read."""
    header = elf_header(fd) if size >= MIN_SIZE else None
    if header is None:
        return None
    is64, _, _, _, headers = header
    segments = segments_of(fd, size, is64, headers)
    dynamic = None if segments is None else dynamic_entries(fd, size, is64, segments)
    if segments is None or dynamic is None:
        return None
    entries = dict(zip(*dynamic, strict=True))
    strtab, verdef = entries.get(DT_STRTAB), entries.get(_DT_VERDEF)
    if strtab is None or verdef is None:
        return None
    strings_at = file_offset(segments, strtab)
    at = file_offset(segments, verdef)
    if not 0 <= strings_at < size or not 0 <= at < size:
        return None
    strings = os.pread(fd, min(entries.get(_DT_STRSZ, 0), _MAX_DYNSTR), strings_at)
    count = min(entries.get(_DT_VERDEFNUM, 0), _MAX_VERDEFS)
    # A definition with a parent version has two Verdaux: 36 bytes; 64 a definition leaves room.
    table = os.pread(fd, min(count * 64, 1 << 16), at)
    best = None
    offset = 0
    # Each definition names its first Verdaux (vd_aux) and the next definition (vd_next), relative to
    # itself; vda_name (the Verdaux's first word) is the version's name in the string table.
    for _ in range(count):
        if offset + _VERDEF.size > len(table):
            break
        _, _, _, _, _, aux, following = _VERDEF.unpack_from(table, offset)
        if offset + aux + 4 <= len(table):
            (name_at,) = struct.unpack_from("<I", table, offset + aux)
            end = strings.find(b"\0", name_at)
            name = strings[name_at:end] if end >= 0 else b""
            if name.startswith(b"GLIBC_2.") and name[8:].isdigit() and len(name) < 16:
                best = max(best or 0, int(name[8:]))
        if following == 0:
            break
        offset += following
    return best


def elf_header(fd: int) -> tuple[bool, int, int, int, tuple[int, int, int, bytes]] | None:
    """(64-bit, e_type, e_machine, e_flags, (phoff, phentsize, phnum, the file's first bytes)) of a
    little-endian ELF file, or None. The first bytes usually hold the program headers and the notes
    too: one read."""
    head = os.pread(fd, _HEAD, 0)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (_ELFCLASS32, _ELFCLASS64):
        return None
    if head[5] != _ELFDATA2LSB:  # every field below is read little-endian
        return None
    is64 = head[4] == _ELFCLASS64
    if is64 and len(head) < 64:
        return None
    fields = struct.unpack_from("<HHIQQQIHHH" if is64 else "<HHIIIIIHHH", head, 16)
    return is64, fields[0], fields[1], fields[6], (fields[4], fields[8], fields[9], head)


def _pread(fd: int, length: int, offset: int, head: bytes) -> bytes:
    """``os.pread``, from ``head`` (the file's first bytes) when they hold the range."""
    if offset + length <= len(head):
        return head[offset : offset + length]
    return os.pread(fd, length, offset)


def arch_flags(machine: int, is64: bool, e_flags: int) -> int | None:
    """The flags' architecture bits (0: a plain 32-bit libc6/ELF library); None for a foreign machine
    or one ldconfig skips (a RISC-V float ABI other than soft or double, an unknown RISC-V flag)."""
    if machine == _EM_X86_64:
        return FLAG_X8664_LIB64 if is64 else FLAG_X8664_LIBX32
    if machine == _EM_386 and not is64:
        return 0
    if machine == _EM_AARCH64 and is64:
        return FLAG_AARCH64_LIB64
    if machine == _EM_PPC64 and is64:  # ppc64le (big-endian ppc64 is refused above, as is s390x)
        return FLAG_POWERPC_LIB64
    # RISC-V: the same flags for rv32 and rv64, as ldconfig stores them.
    if machine == _EM_RISCV and not e_flags & ~(_EF_RISCV_FLOAT_ABI | _EF_RISCV_RVC):
        return _RISCV_FLOAT_ABIS.get(e_flags & _EF_RISCV_FLOAT_ABI)
    return None


def segments_of(fd: int, size: int, is64: bool, headers: tuple[int, int, int, bytes]) -> list[Segment] | None:
    """(type, offset, vaddr, filesz, align) of each program header (their offset, entry size and count);
    None when the table does not fit in the file."""
    phoff, phentsize, phnum, head = headers
    phdr = _PHDR64 if is64 else _PHDR32
    if phnum > _MAX_PHDRS or phentsize < phdr.size or phoff + phnum * phentsize > size:
        return None
    table = _pread(fd, phnum * phentsize, phoff, head)
    if phentsize == phdr.size:
        rows = list(phdr.iter_unpack(table))
    else:
        rows = [phdr.unpack_from(table, index * phentsize) for index in range(phnum)]
    # The two classes order their fields apart.
    if is64:
        return [(r[0], r[2], r[3], r[5], r[7]) for r in rows]
    return [(r[0], r[1], r[2], r[4], r[7]) for r in rows]


def file_offset(segments: list[Segment], address: int) -> int:
    """Where the loadable segment that maps ``address`` puts it in the file (the address itself if
    none does)."""
    base = next(
        (
            vaddr - offset
            for kind, offset, vaddr, filesz, _ in segments
            if kind == _PT_LOAD and 0 <= address - vaddr < filesz
        ),
        0,
    )
    return address - base


def dynamic_entries(
    fd: int, size: int, is64: bool, segments: list[Segment]
) -> tuple[list[int], list[int]] | None:
    """The dynamic segment's tags and values, up to DT_NULL; None without one."""
    dynamic = next(((offset, filesz) for kind, offset, _, filesz, _ in segments if kind == _PT_DYNAMIC), None)
    if dynamic is None or dynamic[1] == 0 or dynamic[0] >= size:
        return None
    word = 8 if is64 else 4
    raw = os.pread(fd, min(dynamic[1], _MAX_DYNAMIC), dynamic[0])
    count = len(raw) // (2 * word) * 2
    words = list(struct.unpack_from(f"<{count}{'Q' if is64 else 'I'}", raw))
    tags, values = words[0::2], words[1::2]
    if _DT_NULL in tags:  # the entries end at DT_NULL
        end = tags.index(_DT_NULL)
        del tags[end:], values[end:]
    return tags, values


def dynamic_names(
    fd: int, size: int, is64: bool, segments: list[Segment], *, classify: bool
) -> tuple[bytes | None, bool, bytes | None] | None:
    """(SONAME, needs libc or libm, interpreter) from the dynamic segment; the last two only when
    ``classify`` (a 32-bit library's type depends on them, a 64-bit one's never)."""
    dynamic = dynamic_entries(fd, size, is64, segments)
    if dynamic is None:
        return None
    tags, values = dynamic
    if DT_STRTAB not in tags:
        return None
    # DT_STRTAB is an address: the loadable segment that maps it gives its place in the file.
    strtab = file_offset(segments, values[tags.index(DT_STRTAB)])
    soname = None
    if _DT_SONAME in tags:
        at = strtab + values[tags.index(_DT_SONAME)]
        if not 0 <= at < size:
            return None
        soname = string_at(fd, at)
    if not classify:
        return soname, False, None
    needs_libc = False
    for tag, value in zip(tags, values, strict=False):
        at = strtab + value
        if tag == DT_NEEDED and 0 <= at < size and string_at(fd, at) in _LIBC6_NEEDED:
            needs_libc = True
    interpreter = next(
        (string_at(fd, offset) for kind, offset, _, _, _ in segments if kind == PT_INTERP and offset < size),
        None,
    )
    return soname, needs_libc, interpreter


def _abi_tag(fd: int, size: int, is64: bool, segments: list[Segment], head: bytes) -> int:
    """glibc 2.35's ``process_elf_file`` on PT_NOTE segments: the first ``NT_GNU_ABI_TAG`` note (owner
    "GNU", 16 bytes) of a segment of at least 32 bytes aligned to 4 or 8, as OS << 24 | major << 16 |
    minor << 8 | patch; a segment whose note gives 0 lets the next one try. 0 without one."""
    mask = (1 << 64) - 1 if is64 else (1 << 32) - 1  # ldconfig's arithmetic is in the class's word
    for kind, offset, _, filesz, align in segments:
        if kind != _PT_NOTE or filesz < 32 or align not in (4, 8) or offset >= size:
            continue
        data = _pread(fd, min(filesz, _MAX_NOTES), offset, head)
        pos, left = 0, filesz
        while pos + 32 <= len(data):
            namesz, descsz, note_type = struct.unpack_from("<III", data, pos)
            if namesz == 4 and descsz == 16 and note_type == 1 and data[pos + 12 : pos + 16] == b"GNU\0":
                system, major, minor, patch = struct.unpack_from("<IIII", data, pos + 16)
                version: int = (
                    (system << 24) | (major & 0xFF) << 16 | (minor & 0xFF) << 8 | patch & 0xFF
                ) & 0xFFFFFFFF
                if version:
                    return version
                break
            step = (((12 + namesz + align - 1) & -align & mask) + descsz + align - 1) & -align & mask
            if left - 32 < step or step == 0:
                break
            left -= step
            pos += step
    return 0


def string_at(fd: int, offset: int) -> bytes:
    raw = os.pread(fd, _MAX_NAME, offset)
    end = raw.find(b"\0")
    return raw if end < 0 else raw[:end]
