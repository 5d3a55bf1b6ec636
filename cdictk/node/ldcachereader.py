"""Entries of glibc's ``/etc/ld.so.cache``, parsed with the standard library alone.

Layouts (glibc's ``sysdeps/generic/dl-cache.h``):

* new, alone (glibc >= 2.32 writes only this): ``"glibc-ld.so.cache" "1.1"``, nlibs, len_strings, a flags
  byte (endianness), 3 pad bytes, extension_offset, 3 unused words (48 bytes), then nlibs entries of
  (int32 flags, uint32 key, uint32 value, uint32 osversion, uint64 hwcap) and the string table. String
  offsets count from the start of this header.
* old: ``"ld.so-1.7.0"`` + pad, uint32 nlibs (16 bytes), nlibs entries of (int32 flags, uint32 key,
  uint32 value), string offsets counting from the end of those entries. ldconfig's "compat" output hides
  a whole new-format cache at the start of that string table, aligned to 8 (4 on i386); when it is there
  we read it instead, as ld.so does.

The old format declares no byte order; it and a new header whose endianness is "unset" are read in the
host's order, as ld.so does. Only ELF libc6 entries are kept. Entries of glibc-hwcaps subdirectories
(hwcap extension bit set) are kept too: same name, a path in ``.../glibc-hwcaps/<level>/``, and their
hwcap word, which says the loader takes them only on a CPU that has what it names.
Every offset is checked before use and every count is bounded by the buffer, so bad input raises
``LdCacheError`` and nothing else. :mod:`cdictk.node.libchoice` reads a driver root's cache to choose
the libraries cdictk loads.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from typing import NamedTuple

from cdictk.startpath.helpers.ldcachefile import NEW_MAGIC as _NEW_MAGIC
from cdictk.startpath.helpers.ldcachefile import OLD_ENTRY as _OLD_ENTRY
from cdictk.startpath.helpers.ldcachefile import OLD_HEADER as _OLD_HEADER
from cdictk.startpath.helpers.ldcachefile import OLD_MAGIC as _OLD_MAGIC
from cdictk.startpath.helpers.ldcachefile import new_header_at

_NEW_HEADER, _NEW_ENTRY = 48, 24
_ENDIAN_UNSET, _ENDIAN_LITTLE, _ENDIAN_BIG = 0, 2, 3
_MAX_STRING = 4096  # PATH_MAX: no longer name or path can be opened anyway

FLAG_TYPE_MASK = 0x00FF
FLAG_ELF_LIBC6 = 0x0003
FLAG_ARCH_MASK = 0xFF00
# Word size of each arch part of the flags (ldconfig.h's FLAG_*). Arch 0 is a plain ELF: the 32-bit ABI
# of every multilib host (i386 on x86-64, ppc32, s390, sparc32) and of 32-bit-only hosts; alpha, the one
# 64-bit exception, runs no NVIDIA driver. RISC-V (0x0f00, 0x1000) is left out on purpose: ldconfig
# writes the same flags for rv32 and rv64 (only the float ABI is recorded), so its width is unknown (0).
_ARCH_BITS = {
    0x0000: 32,
    0x0100: 64,  # sparc64
    0x0200: 64,  # ia64
    0x0300: 64,  # x86-64
    0x0400: 64,  # s390x
    0x0500: 64,  # ppc64 / ppc64le
    0x0600: 32,  # mips64 n32 (ILP32)
    0x0700: 64,  # mips64 n64
    0x0800: 32,  # x86-64 x32 (ILP32)
    0x0900: 32,  # ARM hard-float
    0x0A00: 64,  # aarch64
    0x0B00: 32,  # ARM soft-float
    0x0C00: 32,  # mips32 NaN2008
    0x0D00: 32,  # mips64 n32 NaN2008
    0x0E00: 64,  # mips64 n64 NaN2008
    0x1100: 64,  # LoongArch soft-float (LoongArch is 64-bit only in glibc)
    0x1200: 64,  # LoongArch double-float
}
_NATIVE = "<" if sys.byteorder == "little" else ">"


class CacheEntry(NamedTuple):
    """One entry of the cache. A NamedTuple, not a dataclass: NVML's runner imports this module (through
    :mod:`cdictk.node.libchoice`) before it forks its child, which ``dataclasses`` would delay.

    ``name``: the key, e.g. "libcuda.so.1"; ``path``: the value as stored, inside the cache's own root
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.1"); ``flags``: the raw flags word; ``bits``: 64 or 32 (from
    the flags' arch part), 0 when unknown; ``hwcap``: the hwcap word (0 in the old format, and for an
    entry every CPU of its ABI may load).
    """

    name: str
    path: str
    flags: int
    bits: int
    hwcap: int = 0


class LdCacheError(Exception):
    """The cache cannot be read or is not a well-formed ld.so.cache; the message says what is wrong."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing  # there is no file at all (a driver tree such as /usr/local/nvidia has none)


def parse_ld_cache(data: bytes, name: str | None = None) -> list[CacheEntry]:
    """The ELF libc6 entries of an ld.so.cache image, in file order; ``name``: those with that key
    alone (the others' strings are not decoded: a lookup of one SONAME costs a fraction of the whole)."""
    if not data:
        raise LdCacheError("empty file")
    if data.startswith(_NEW_MAGIC):
        return _parse_new(data, 0, name)
    if not data.startswith(_OLD_MAGIC):
        if _NEW_MAGIC.startswith(data) or _OLD_MAGIC.startswith(data):
            raise LdCacheError("truncated header")
        if data.startswith(_NEW_MAGIC[:-3]):
            raise LdCacheError(f"unsupported cache version {data[17:20]!r}")
        raise LdCacheError("not an ld.so.cache (bad magic)")
    if len(data) < _OLD_HEADER:
        raise LdCacheError("truncated header")
    # A new-format cache embedded in the old one is read instead, as ld.so does; without one, it is an
    # old-only cache in the host's order.
    new_start = new_header_at(data)
    if new_start is not None:
        return _parse_new(data, new_start, name)
    (nlibs,) = struct.unpack_from(_NATIVE + "I", data, 12)
    strings = _OLD_HEADER + nlibs * _OLD_ENTRY
    if strings > len(data):
        raise LdCacheError(f"truncated entry table ({nlibs} entries do not fit in {len(data)} bytes)")
    return _entries(data, _NATIVE + "iII", _OLD_HEADER, strings, strings, only=name)


def _parse_new(data: bytes, start: int, name: str | None) -> list[CacheEntry]:
    if len(data) < start + _NEW_HEADER:
        raise LdCacheError("truncated header")
    endian = data[start + 28] & 3  # the low two bits of the flags byte; the others are reserved
    if endian == _ENDIAN_UNSET:
        order = _NATIVE
    elif endian == _ENDIAN_LITTLE:
        order = "<"
    elif endian == _ENDIAN_BIG:
        order = ">"
    else:
        raise LdCacheError("cache is marked invalid (endianness flag 1)")
    nlibs, len_strings = struct.unpack_from(order + "II", data, start + 20)
    table = start + _NEW_HEADER
    strings = table + nlibs * _NEW_ENTRY
    if strings > len(data):
        raise LdCacheError(f"truncated entry table ({nlibs} entries do not fit in {len(data)} bytes)")
    if strings + len_strings > len(data):
        raise LdCacheError("truncated string table")
    return _entries(data, order + "iIIIQ", table, strings, start, only=name)


def _entries(data: bytes, fmt: str, table: int, end: int, base: int, *, only: str | None) -> list[CacheEntry]:
    """Entries from data[table:end] (each unpacked with ``fmt``), string offsets counting from ``base``;
    ``only``: those whose key is that name."""
    found: list[CacheEntry] = []
    text: dict[int, str] = {}  # names and directories repeat across entries: decode each offset once
    key = None if only is None else only.encode("utf-8", "surrogateescape") + b"\0"
    for row in struct.iter_unpack(fmt, data[table:end]):
        flags = row[0]
        if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6:
            continue  # libc5 / a.out leftovers: nothing a modern loader would use
        if key is not None and not data.startswith(key, base + row[1]):
            continue
        name = _string(data, base, row[1], text)
        path = _string(data, base, row[2], text)
        hwcap = row[4] if len(row) > 4 else 0  # the old format has none
        found.append(CacheEntry(name, path, flags, _ARCH_BITS.get(flags & FLAG_ARCH_MASK, 0), hwcap))
    return found


def _string(data: bytes, base: int, offset: int, seen: dict[int, str]) -> str:
    cached = seen.get(offset)
    if cached is not None:
        return cached
    start = base + offset
    if start >= len(data):
        raise LdCacheError(f"string offset {offset} out of range")
    # Bounded search: an unterminated string costs at most PATH_MAX bytes, not the rest of the file.
    nul = data.find(b"\0", start, start + _MAX_STRING + 1)
    if nul < 0:
        raise LdCacheError(f"string at offset {offset} is not NUL-terminated within {_MAX_STRING} bytes")
    # Paths are bytes to the kernel: keep undecodable ones round-trippable, as os.fsdecode does.
    value = data[start:nul].decode("utf-8", "surrogateescape")
    seen[offset] = value
    return value


def read_ld_cache(path: str, max_bytes: int = 64 << 20, name: str | None = None) -> list[CacheEntry]:
    """The entries of the cache at ``path`` (at most ``max_bytes``; ``name``: those with that key
    alone); every failure raises LdCacheError."""
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang us in open(); it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise LdCacheError("not a regular file")
            size = info.st_size
            if size > max_bytes:
                raise LdCacheError(f"larger than {max_bytes} bytes")
            # Read what fstat promises plus one byte, so a huge cap costs no huge buffer; a file longer
            # than its st_size (or growing) is read on up to one byte over the cap, which is refused.
            data = handle.read(size + 1)
            if len(data) > size:
                data += handle.read(max_bytes + 1 - len(data))
    except FileNotFoundError as exc:
        raise LdCacheError(f"cannot read: {exc.strerror or exc}", missing=True) from exc
    except OSError as exc:
        raise LdCacheError(f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise LdCacheError(f"larger than {max_bytes} bytes")
    return parse_ld_cache(data, name)
