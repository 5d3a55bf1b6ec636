"""Where an ld.so.cache's new-format header is: the one answer the hook's writer and the node's reader use."""

from __future__ import annotations

import struct

import pytest

from cdictk.startpath.helpers.ldcachefile import NEW_MAGIC, OLD_MAGIC, new_header_at

NEW = NEW_MAGIC + bytes(28)  # a new header's first bytes; enough for the magic to be found


def compat(count: int, align: int, order: str = "<") -> bytes:
    """ldconfig's compat layout: the old header, ``count`` 12-byte entries, padding to ``align``, the new."""
    old = OLD_MAGIC + b"\0" + struct.pack(order + "I", count) + bytes(12 * count)
    return old + bytes(-len(old) % align) + NEW


def test_a_new_format_cache_starts_with_its_header() -> None:
    assert new_header_at(NEW) == 0


@pytest.mark.parametrize(
    ("data", "at"),
    [
        (compat(3, 8), 56),  # 16 + 36 bytes, aligned to 8
        (compat(3, 4), 52),  # i386's alignment
        (compat(2, 8), 40),
        (compat(3, 8, ">"), 56),  # written on a big-endian machine
    ],
)
def test_a_compat_cache_holds_it_after_the_old_entries(data: bytes, at: int) -> None:
    assert new_header_at(data) == at


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage" * 8,
        OLD_MAGIC,  # shorter than the old header
        OLD_MAGIC + b"\0" + struct.pack("<I", 2) + bytes(24),  # old format alone
        OLD_MAGIC + b"\0\xff\xff\xff\x7f",  # a count past the end of the file
    ],
)
def test_anything_else_has_none(data: bytes) -> None:
    assert new_header_at(data) is None
