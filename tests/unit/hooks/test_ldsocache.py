"""The ld.so.cache layout: this host's own cache, taken apart and shuffled, is rebuilt byte for byte."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from cdictk.hooks.ldsocache import MAGIC, CacheEntry, build_cache, libkey, read_generator

HOST_CACHE = Path("/etc/ld.so.cache")


def _entries(data: bytes) -> list[CacheEntry]:
    count = struct.unpack_from("<I", data, 20)[0]
    entries = []
    for index in range(count):
        flags, key, value, _, hwcap = struct.unpack_from("<iIIIQ", data, 48 + 24 * index)
        entries.append(
            CacheEntry(
                data[key : data.index(b"\0", key)], data[value : data.index(b"\0", value)], flags, hwcap
            )
        )
    return entries


def test_the_hosts_cache_is_rebuilt_byte_for_byte_from_its_entries_in_any_order() -> None:
    data = HOST_CACHE.read_bytes() if HOST_CACHE.exists() else b""
    if not data.startswith(MAGIC):
        pytest.skip(f"{HOST_CACHE} is missing or not in glibc's new format only")
    entries = _entries(data)
    generator = read_generator(data)
    assert generator is not None and generator.startswith(b"ldconfig")
    random.Random(7).shuffle(entries)  # noqa: S311 (a repeatable order)
    assert build_cache(entries, generator) == data


def test_names_order_as_the_loader_compares_them() -> None:
    names = [b"libfoo.so.10", b"libfoo.so.9", b"libfoo.so", b"libfoo.so.9.1", b"libfop.so", b"libfo\xe9.so"]
    # Digit runs compare as numbers and above any other character; bytes as signed chars (0xe9 < 0).
    assert sorted(names, key=libkey) == [
        b"libfo\xe9.so",
        b"libfoo.so",
        b"libfoo.so.9",
        b"libfoo.so.9.1",
        b"libfoo.so.10",
        b"libfop.so",
    ]


def test_an_empty_cache_and_a_foreign_file() -> None:
    empty = build_cache([], b"gen")
    assert empty.startswith(MAGIC) and read_generator(empty) == b"gen"
    assert read_generator(b"ld.so-1.7.0" + b"\0" * 64) is None
    assert read_generator(b"") is None
