"""Natural order for names with numbers in them: gpu2 before gpu10, libfoo.so.1.9 before 1.10."""

from __future__ import annotations

import re

_RUNS = re.compile(r"(\d+)")  # runs of decimal digits ("٣" too, "²" not)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """The name cut into runs of decimal digits, each a number, and runs of other characters, each
    text: ``gpu10`` -> ``((1, "gpu"), (0, 10))``."""
    return tuple((0, int(part)) if part.isdecimal() else (1, part) for part in _RUNS.split(name) if part)
