"""Reading untrusted JSON and files: size caps, no duplicate keys, no NaN, no surprises.

The JSON is :mod:`cdictk.fastjson`'s, with its errors as :class:`CdictkError`. Standard library only.
"""

from __future__ import annotations

import os
import stat

from cdictk import fastjson
from cdictk.errors import CdictkError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def loads(text: str | bytes, file: str) -> Any:
    """Parse JSON, rejecting duplicate keys, NaN/Infinity and 1e999; errors name ``file`` and the position."""
    try:
        return fastjson.loads(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    except fastjson.JsonError as exc:
        raise CdictkError(file, "", str(exc)) from None


def read_capped(path: str, limit: int) -> bytes:
    """Read a regular file of at most ``limit`` bytes.

    Symlinks are followed (spec dirs may hold links), but FIFOs and devices are refused before a
    read could block, and a file that grows past the cap while we read is still refused.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CdictkError(path, "", "not a regular file")
        if st.st_size > limit:
            raise CdictkError(path, "", f"file is {st.st_size} bytes, over the {limit}-byte limit")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise CdictkError(path, "", f"file is over the {limit}-byte limit")
        return b"".join(chunks)
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
