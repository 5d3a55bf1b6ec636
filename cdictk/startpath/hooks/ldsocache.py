"""The bytes of an ``ld.so.cache``, laid out as the image's glibc ldconfig lays them out.

Entries are kept in ldconfig's order (its ``compare``, a stable insertion), which the dynamic loader's
binary search relies on. Three layouts, by release (:class:`~cdictk.startpath.hooks.ldrelease.Release`
decides):

- 2.33 and later: the new format (a header with the byte-order mark, one 24-byte entry per library), a
  string table tail-merged the way ``stringtable_finalize`` does it, and the extension directory with
  the generator string (and the glibc-hwcaps section, which this module never needs:
  :mod:`cdictk.startpath.hooks.ldscan` leaves images with glibc-hwcaps directories to ldconfig);
- 2.32 and earlier in the new format (2.32's default, and Debian's and Ubuntu's 2.31): each entry's
  name and path written out in entry order, nothing shared, no extension directory;
- the old format with the new one inside its string table (upstream's default up to 2.31): an
  ``ld.so-1.7.0`` header and 12-byte entries (an even number of them: the last one repeated) first.

For the same libraries the file is byte for byte the one that ldconfig writes.
"""

from __future__ import annotations

import struct

from cdictk.startpath.helpers.ldcachefile import NEW_MAGIC as MAGIC
from cdictk.startpath.helpers.ldcachefile import OLD_MAGIC

_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, extension offset
_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_HEADER = struct.Struct("<11sxI")  # magic, nlibs
_OLD_ENTRY = struct.Struct("<iII")  # flags, key, value
_NEW_ALIGN = 8  # the new header's alignment (a 64-bit field): where it starts inside the old format
_EXTENSION = struct.Struct("<II")  # magic, count
_SECTION = struct.Struct("<IIII")  # tag, flags, offset, size
_EXTENSION_MAGIC = 0xEAA42174
_TAG_GENERATOR = 0
_ENDIAN_LITTLE = 2


class CacheEntry:
    """One library in the cache (a plain class: dataclasses is too heavy an import for the hook)."""

    __slots__ = ("flags", "hwcap", "osversion", "path", "soname")

    def __init__(self, soname: bytes, path: bytes, flags: int, hwcap: int = 0, osversion: int = 0) -> None:
        self.soname = soname  # the key the loader looks up
        self.path = path  # the directory as configured, "/", the soname
        self.flags = flags  # FLAG_ELF_LIBC6 | the architecture's (0x0303 for x86-64)
        self.hwcap = hwcap  # legacy hwcap bits of the directory (0 for every directory cdictk handles)
        self.osversion = osversion  # the ABI note's kernel version (written by ldconfig 2.35 and older)


def libkey(name: bytes) -> tuple[tuple[int, int], ...]:
    """A sort key that orders names as glibc's ``_dl_cache_libcmp`` does.

    That function compares a run of digits as a number (wrapping as C's int does), ranks a digit run
    above any other character, and compares other characters as signed C chars, the terminating NUL
    among them: each becomes a token here, and tuples compare token by token the same way.
    """
    tokens: list[tuple[int, int]] = []
    i, size = 0, len(name)
    while i < size:
        byte = name[i]
        if 0x30 <= byte <= 0x39:
            value = 0
            while i < size and 0x30 <= name[i] <= 0x39:
                value = _int32(value * 10 + name[i] - 0x30)
                i += 1
            tokens.append((1, value))
        else:
            tokens.append((0, byte - 256 if byte > 127 else byte))
            i += 1
    tokens.append((0, 0))
    return tuple(tokens)


def _int32(value: int) -> int:
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def sort_entries(entries: list[CacheEntry]) -> list[CacheEntry]:
    """ldconfig's order, which the loader's binary search relies on: by SONAME (:func:`libkey`), then
    flags, then hwcap specificity, then osversion (0 from 2.36 on), all descending; ties in the order
    the entries were added (ldconfig inserts after every entry that does not compare greater; Python's
    sort is stable in reverse too)."""
    return sorted(
        entries,
        key=lambda e: (libkey(e.soname), e.flags, e.hwcap.bit_count(), e.hwcap, e.osversion),
        reverse=True,
    )


def _string_table(strings: set[bytes]) -> tuple[bytes, dict[bytes, int]]:
    """ldconfig's tail-merged string table: the strings in descending order of their reversed bytes,
    so that a string that ends another follows it and shares its bytes."""
    offsets: dict[bytes, int] = {}
    table = bytearray()
    previous, previous_offset = b"", 0
    for string in sorted(strings, key=lambda text: text[::-1], reverse=True):
        if previous.endswith(string):
            offset = previous_offset + len(previous) - len(string)
        else:
            offset = len(table)
            table += string + b"\0"
        offsets[string] = offset
        previous, previous_offset = string, offset
    return bytes(table), offsets


def build_cache(
    entries: list[CacheEntry],
    generator: bytes,
    *,
    extension: bool = True,
    compat: bool = False,
    endian: int = _ENDIAN_LITTLE,
) -> bytes:
    """The cache file for ``entries`` (in the order they were found), naming ``generator`` as its writer.

    ``extension``: glibc 2.33's layout (tail-merged strings, the extension directory); without it,
    the earlier one, inside the old format when ``compat``. ``endian``: the new header's flags byte
    (2.33 writes 2, little-endian; earlier releases 0 unless patched).
    """
    ordered = sort_entries(entries)
    if extension:
        return _with_extension(ordered, generator)
    # Each entry's name and path in turn, offsets counted from the new header.
    strings_at = _HEADER.size + len(ordered) * _ENTRY.size
    table = bytearray()
    rows = []
    for entry in ordered:
        key = strings_at + len(table)
        table += entry.soname + b"\0"
        rows.append((entry, key, strings_at + len(table)))
        table += entry.path + b"\0"
    new = bytearray(_HEADER.pack(MAGIC, len(ordered), len(table), endian, 0))
    for entry, key, value in rows:
        new += _ENTRY.pack(entry.flags, key, value, entry.osversion, entry.hwcap)
    if not compat:
        return bytes(new + table)
    # The old entries' strings count from the end of their table, where the new header sits (after
    # padding to its alignment): the same strings, that far further on.
    count = len(ordered) + len(ordered) % 2
    size = _OLD_HEADER.size + count * _OLD_ENTRY.size
    pad = -size % _NEW_ALIGN
    old = bytearray(_OLD_HEADER.pack(OLD_MAGIC, count))
    for entry, key, value in rows:
        old += _OLD_ENTRY.pack(entry.flags, key + pad, value + pad)
    if count > len(rows):
        old += old[-_OLD_ENTRY.size :]
    return bytes(old + b"\0" * pad + new + table)


def _with_extension(ordered: list[CacheEntry], generator: bytes) -> bytes:
    table, offsets = _string_table({e.soname for e in ordered} | {e.path for e in ordered})
    strings_at = _HEADER.size + len(ordered) * _ENTRY.size
    extension_at = (strings_at + len(table) + 3) & ~3
    out = bytearray(_HEADER.pack(MAGIC, len(ordered), len(table), _ENDIAN_LITTLE, extension_at))
    for entry in ordered:
        out += _ENTRY.pack(
            entry.flags,
            strings_at + offsets[entry.soname],
            strings_at + offsets[entry.path],
            entry.osversion,
            entry.hwcap,
        )
    out += table
    out += b"\0" * (extension_at - len(out))
    generator_at = extension_at + _EXTENSION.size + _SECTION.size
    out += _EXTENSION.pack(_EXTENSION_MAGIC, 1)
    out += _SECTION.pack(_TAG_GENERATOR, 0, generator_at, len(generator))
    out += generator
    return bytes(out)


def read_generator(data: bytes) -> bytes | None:
    """The generator string of an existing cache (which ldconfig wrote it), or None."""
    if len(data) < _HEADER.size or not data.startswith(MAGIC):
        return None
    extension_at = _HEADER.unpack_from(data)[4]
    if extension_at == 0 or extension_at + _EXTENSION.size > len(data):
        return None
    magic, count = _EXTENSION.unpack_from(data, extension_at)
    if magic != _EXTENSION_MAGIC:
        return None
    for index in range(min(count, 16)):
        at = extension_at + _EXTENSION.size + index * _SECTION.size
        if at + _SECTION.size > len(data):
            return None
        tag, _, offset, size = _SECTION.unpack_from(data, at)
        if tag == _TAG_GENERATOR and offset + size <= len(data) and size <= 4096:
            return data[offset : offset + size]
    return None
