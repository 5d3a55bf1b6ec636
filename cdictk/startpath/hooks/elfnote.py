"""Read one note section of an ELF file that the container image controls.

Everything comes through ``os.pread`` on a descriptor the caller opened, at offsets and sizes checked
first against the file's size and against fixed caps, so a hostile file can make this raise
:class:`ElfError` but cannot make it read past the end, allocate much, loop or fail with an
``IndexError``/``struct.error``. ELF32 and ELF64, either byte order; only the section headers, the
section-name table and the one note section are read, never the whole file (a compat libcuda is tens
of megabytes).
"""

from __future__ import annotations

import os
import stat
import struct

MAX_SECTIONS = 4096
MAX_STRTAB = 1 << 20
_SHT_STRTAB = 3
_SHT_NOTE = 7
_SHN_LORESERVE = 0xFF00
_SHN_XINDEX = 0xFFFF
_NOTE_HEADER = 12  # namesz, descsz, type: 32-bit words in both classes


class ElfError(ValueError):
    """The file is not an ELF file, or one whose headers do not add up."""


def read_notes(fd: int, section: str, *, limit: int = 64 << 10) -> list[tuple[str, int, bytes]]:
    """The ``(owner, type, desc)`` notes of note section ``section``; ``[]`` if there is no such section.

    ``fd`` must be readable with ``pread`` (not O_PATH). The section may be at most ``limit`` bytes.
    """
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ElfError("not a regular file")
    size = st.st_size
    ident = _pread(fd, 0, 16, size, "ELF identification")
    if ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if ident[4] not in (1, 2):
        raise ElfError(f"unknown ELF class {ident[4]}")
    if ident[5] not in (1, 2):
        raise ElfError(f"unknown ELF byte order {ident[5]}")
    wide = ident[4] == 2
    order = "<" if ident[5] == 1 else ">"

    if wide:
        header = _pread(fd, 0, 64, size, "ELF header")
        (shoff,) = struct.unpack_from(order + "Q", header, 40)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", header, 58)
        shdr = struct.Struct(order + "IIQQQQIIQQ")
    else:
        header = _pread(fd, 0, 52, size, "ELF header")
        (shoff,) = struct.unpack_from(order + "I", header, 32)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", header, 46)
        shdr = struct.Struct(order + "IIIIIIIIII")
    if shoff == 0:
        return []  # no section headers at all: nothing is named, so the section is absent
    if shentsize != shdr.size:
        raise ElfError(f"section header size {shentsize}, expected {shdr.size}")

    if shnum == 0 or shstrndx == _SHN_XINDEX:
        # Extended numbering: the real values live in section header 0.
        first = shdr.unpack(_pread(fd, shoff, shdr.size, size, "section header 0"))
        if shnum == 0:
            shnum = first[5]
        if shstrndx == _SHN_XINDEX:
            shstrndx = first[6]
    elif shstrndx >= _SHN_LORESERVE:
        raise ElfError(f"section name table index {shstrndx} is reserved")
    if shnum > MAX_SECTIONS:
        raise ElfError(f"{shnum} sections, more than {MAX_SECTIONS}")
    if shnum == 0 or shstrndx == 0:
        return []  # no section-name table: no section has a name
    if shstrndx >= shnum:
        raise ElfError(f"section name table index {shstrndx} out of range ({shnum} sections)")

    table = _pread(fd, shoff, shnum * shdr.size, size, "section header table")
    # (sh_name, sh_type, sh_offset, sh_size, sh_addralign) of each section.
    sections = [(h[0], h[1], h[4], h[5], h[8]) for h in shdr.iter_unpack(table)]

    _, names_type, names_offset, names_size, _ = sections[shstrndx]
    if names_type != _SHT_STRTAB:
        raise ElfError(f"section name table has type {names_type}, not a string table")
    if names_size > MAX_STRTAB:
        raise ElfError(f"section name table of {names_size} bytes, more than {MAX_STRTAB}")
    names = _pread(fd, names_offset, names_size, size, "section name table")
    wanted = section.encode()

    for index, (name_index, sh_type, offset, length, align) in enumerate(sections):
        if index == 0:
            continue  # the null section; under extended numbering it holds counts, not a name
        if name_index >= len(names):
            raise ElfError(f"section {index}: name index {name_index} outside the name table")
        end = names.find(b"\0", name_index)
        if end < 0:
            raise ElfError(f"section {index}: name is not NUL-terminated")
        if names[name_index:end] != wanted:
            continue
        if sh_type != _SHT_NOTE:
            raise ElfError(f"section {section} has type {sh_type}, not a note section")
        if length > limit:
            raise ElfError(f"section {section} is {length} bytes, more than {limit}")
        data = _pread(fd, offset, length, size, f"section {section}")
        return _parse_notes(data, 8 if align == 8 else 4, order, section)
    return []


def _parse_notes(data: bytes, align: int, order: str, section: str) -> list[tuple[str, int, bytes]]:
    notes: list[tuple[str, int, bytes]] = []
    pos = 0
    end = len(data)
    words = order + "III"
    while end - pos >= _NOTE_HEADER:
        namesz, descsz, note_type = struct.unpack_from(words, data, pos)
        # Both sizes are at most 2**32 - 1, so these sums cannot grow without bound.
        desc_at = pos + _align_up(_NOTE_HEADER + namesz, align)
        desc_end = desc_at + descsz
        if desc_end > end:
            raise ElfError(f"section {section}: note at offset {pos} runs past the section's end")
        name = data[pos + _NOTE_HEADER : pos + _NOTE_HEADER + namesz]
        owner = name.rstrip(b"\0").decode("utf-8", "replace")
        notes.append((owner, note_type, data[desc_at:desc_end]))
        # The last note's trailing padding may be missing: the loop condition then ends the walk.
        pos = desc_at + _align_up(descsz, align)
    if data[pos:].strip(b"\0"):
        raise ElfError(f"section {section}: {end - pos} stray bytes after the last note")
    return notes


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) & -align


def _pread(fd: int, offset: int, length: int, file_size: int, what: str) -> bytes:
    """Exactly ``length`` bytes at ``offset``, which must lie inside the file."""
    if offset > file_size or length > file_size - offset:
        raise ElfError(f"{what} ({length} bytes at offset {offset}) lies past the end of the file")
    chunks: list[bytes] = []
    while length:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            raise ElfError(f"{what}: the file shrank while being read")
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)
