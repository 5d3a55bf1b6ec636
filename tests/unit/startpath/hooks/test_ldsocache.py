"""The ld.so.cache layouts: caches real ldconfigs wrote, taken apart and shuffled, are rebuilt byte for
byte: this host's own, and those of tests/data/ldcache/, each the ``/etc/ld.so.cache`` of a minbase
image of the release it is named for (tests/fetch-rootfs.sh), as the image's ldconfig wrote it
(``-compat``: Debian 11's ``ldconfig -c compat``, the old format around the new, upstream's default
before 2.32)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from cdictk.node.ldcachereader import parse_ld_cache
from cdictk.startpath.helpers.ldcachefile import NEW_MAGIC as MAGIC
from cdictk.startpath.helpers.ldcachefile import OLD_MAGIC
from cdictk.startpath.hooks.ldrelease import Release
from cdictk.startpath.hooks.ldsocache import CacheEntry, build_cache, libkey, read_generator
from tests import REPO

HOST_CACHE = Path("/etc/ld.so.cache")
RELEASES = REPO / "tests" / "data" / "ldcache"


def _entries(data: bytes) -> list[CacheEntry]:
    """The entries of a new-format cache, alone or inside the old format."""
    start = 0
    if data.startswith(OLD_MAGIC):
        start = 16 + 12 * struct.unpack_from("<I", data, 12)[0]
        start += -start % 8
    assert data.startswith(MAGIC, start)
    count = struct.unpack_from("<I", data, start + 20)[0]
    entries = []
    for index in range(count):
        flags, key, value, osversion, hwcap = struct.unpack_from("<iIIIQ", data, start + 48 + 24 * index)
        key, value = start + key, start + value
        name, path = data[key : data.index(b"\0", key)], data[value : data.index(b"\0", value)]
        entries.append(CacheEntry(name, path, flags, hwcap, osversion))
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


@pytest.mark.parametrize("name", sorted(path.name for path in RELEASES.glob("*.cache")))
def test_each_releases_cache_is_rebuilt_byte_for_byte(name: str) -> None:
    data = (RELEASES / name).read_bytes()
    minor = int(name.split("-")[1].split(".")[1])
    release = Release(minor, debian=True, old_cache=data)
    entries = _entries(data)
    if release.abi_tag:
        assert {e.osversion for e in entries} > {0}  # glibc's own libraries carry Linux 3.2.0
    else:
        assert {e.osversion for e in entries} == {0}
    random.Random(minor).shuffle(entries)  # noqa: S311 (a repeatable order)
    generator = read_generator(data) or b"unused"
    assert (generator != b"unused") == release.extension
    rebuilt = build_cache(
        entries, generator, extension=release.extension, compat=release.compat, endian=release.endian
    )
    assert rebuilt == data
    # And what reads caches in cdictk (the node's reader) reads every layout.
    assert len(parse_ld_cache(rebuilt)) == len(entries)


def test_an_odd_number_of_entries_repeats_the_last_in_the_old_format() -> None:
    entries = [
        CacheEntry(b"libx.so.1", b"/lib/libx.so.1", 0x0303),
        CacheEntry(b"liby.so.1", b"/lib/liby.so.1", 0x0303),
    ]
    even = build_cache(entries, b"", extension=False, compat=True, endian=0)
    odd = build_cache(entries[:1], b"", extension=False, compat=True, endian=0)
    assert struct.unpack_from("<I", odd, 12)[0] == 2
    assert odd[16:28] == odd[28:40]  # the one entry, twice
    assert even[16:28] != even[28:40]
    assert [e.name for e in parse_ld_cache(odd)] == ["libx.so.1"]
    assert odd[40:60] == MAGIC and odd[40 + 28] == 0  # no byte-order mark before 2.33
