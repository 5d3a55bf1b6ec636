"""Start path: standard library only.

The bytes of an ``ld.so.cache``, laid out as glibc's ldconfig (2.32 and later) lays them out.

The new format only (ldconfig's default since 2.32): a header, one 24-byte entry per library, a string
table, and the extension directory with the generator string (and the glibc-hwcaps section, which this
module never needs: :mod:`cdictk.hooks.ldscan` leaves images with glibc-hwcaps directories to ldconfig).
Entries are kept in ldconfig's order (its ``compare``, a stable insertion) and the string table is
tail-merged the way its ``stringtable_finalize`` does it, so that for the same libraries the file is
byte-for-byte the one ldconfig writes. The dynamic loader reads it by binary search on that order.
"""

from __future__ import annotations

import struct

MAGIC = b"glibc-ld.so.cache1.1"
_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, extension offset
_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion (unused), hwcap
_EXTENSION = struct.Struct("<II")  # magic, count
_SECTION = struct.Struct("<IIII")  # tag, flags, offset, size
_EXTENSION_MAGIC = 0xEAA42174
_TAG_GENERATOR = 0
_ENDIAN_LITTLE = 2


class CacheEntry:
    """One library in the cache (a plain class: dataclasses is too heavy an import for the hook)."""

    __slots__ = ("flags", "hwcap", "path", "soname")

    def __init__(self, soname: bytes, path: bytes, flags: int, hwcap: int = 0) -> None:
        self.soname = soname  # the key the loader looks up
        self.path = path  # the directory as configured, "/", the soname
        self.flags = flags  # FLAG_ELF_LIBC6 | the architecture's (0x0303 for x86-64)
        self.hwcap = hwcap  # legacy hwcap bits of the directory (0 for every directory cdictk handles)


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
    flags, then hwcap specificity, all descending; ties in the order the entries were added (ldconfig
    inserts after every entry that does not compare greater; Python's sort is stable in reverse too)."""
    return sorted(
        entries, key=lambda e: (libkey(e.soname), e.flags, e.hwcap.bit_count(), e.hwcap), reverse=True
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


def build_cache(entries: list[CacheEntry], generator: bytes) -> bytes:
    """The cache file for ``entries`` (in the order they were found), naming ``generator`` as its writer."""
    ordered = sort_entries(entries)
    table, offsets = _string_table({e.soname for e in ordered} | {e.path for e in ordered})
    strings_at = _HEADER.size + len(ordered) * _ENTRY.size
    extension_at = (strings_at + len(table) + 3) & ~3
    out = bytearray(_HEADER.pack(MAGIC, len(ordered), len(table), _ENDIAN_LITTLE, extension_at))
    for entry in ordered:
        out += _ENTRY.pack(
            entry.flags, strings_at + offsets[entry.soname], strings_at + offsets[entry.path], 0, entry.hwcap
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
