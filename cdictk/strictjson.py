"""Reading untrusted JSON and files: size caps, no duplicate keys, no NaN, no surprises.

Standard library only (the hooks and the shim use it on every container start).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from cdictk.errors import CdictkError


class DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str | bytes, file: str) -> Any:
    """Parse JSON, rejecting duplicate keys and NaN/Infinity; errors name ``file`` and the position."""
    try:
        return json.loads(text, object_pairs_hook=_object_without_duplicates, parse_constant=_reject_constant)
    except DuplicateKeyError as exc:
        raise CdictkError(file, "", f'duplicate key "{exc.key}"') from None
    except json.JSONDecodeError as exc:
        raise CdictkError(
            file, "", f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise CdictkError(file, "", "invalid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CdictkError(file, "", f"invalid JSON: {exc}") from None


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
