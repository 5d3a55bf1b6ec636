"""The two layouts of glibc's ``ld.so.cache`` (``sysdeps/generic/dl-cache.h``) as far as both of cdictk's
users need them: the hook's writer (:mod:`cdictk.startpath.hooks.ldsocache`, and
:mod:`cdictk.startpath.hooks.ldrelease`, which goes by the image's existing cache) and the node's reader
(:mod:`cdictk.node.ldcachereader`). One place finds where a file's new-format header is.
"""

from __future__ import annotations

import sys

NEW_MAGIC = b"glibc-ld.so.cache1.1"  # the new format's magic and version
OLD_MAGIC = b"ld.so-1.7.0"  # the old format's, padded to 12 bytes, then uint32 nlibs
OLD_HEADER = 16
OLD_ENTRY = 12  # int32 flags, uint32 key, uint32 value
# The old header declares no byte order: the host's first, then the other.
_ORDERS = ("<", ">") if sys.byteorder == "little" else (">", "<")


def new_header_at(data: bytes) -> int | None:
    """Where the new-format header of the cache image ``data`` starts: 0; or inside the old format,
    after its entries (ldconfig's compat layout, aligned to 8, or 4 on i386), with the old header's
    count read in whichever byte order leads to it; None for an old-only cache or anything else."""
    if data.startswith(NEW_MAGIC):
        return 0
    if not data.startswith(OLD_MAGIC) or len(data) < OLD_HEADER:
        return None
    for order in _ORDERS:
        count = int.from_bytes(data[12:16], "little" if order == "<" else "big")
        end = OLD_HEADER + count * OLD_ENTRY
        for start in ((end + 7) & ~7, (end + 3) & ~3):
            if data.startswith(NEW_MAGIC, start):
                return start
    return None
