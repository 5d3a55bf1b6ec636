"""The legacy prestart hook (``cdictk-prestart``, ``nvidia-container-runtime-hook``):
:func:`cdictk.startpath.prestart.main.main` with the slow path it falls back on."""

from __future__ import annotations

import sys

from cdictk.entrypoints.slowpath import slow_path
from cdictk.startpath.prestart.main import main as start

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    return start(argv, misses=slow_path())


if __name__ == "__main__":
    sys.exit(main())
