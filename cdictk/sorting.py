"""Natural order for names with numbers in them: gpu2 before gpu10, libfoo.so.1.9 before 1.10."""

from __future__ import annotations

import re

_RUNS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _RUNS.split(name) if part)
