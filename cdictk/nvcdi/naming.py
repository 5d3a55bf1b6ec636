"""Device names: ``index`` (0, 0:1), ``uuid`` (GPU-..., MIG-...) and ``type-index`` (gpu0, mig0:1)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum

from cdictk.node.gpus import Gpu, MigDevice


class Strategy(Enum):
    INDEX = "index"
    UUID = "uuid"
    TYPE_INDEX = "type-index"


DEFAULT_STRATEGIES = (Strategy.INDEX, Strategy.UUID)


def gpu_names(gpu: Gpu, strategies: tuple[Strategy, ...]) -> list[str]:
    names = {
        Strategy.INDEX: str(gpu.index),
        Strategy.UUID: gpu.uuid,
        Strategy.TYPE_INDEX: f"gpu{gpu.index}",
    }
    return _unique(names[strategy] for strategy in strategies)


def mig_names(mig: MigDevice, strategies: tuple[Strategy, ...]) -> list[str]:
    index = f"{mig.parent_index}:{mig.index}"
    names = {Strategy.INDEX: index, Strategy.UUID: mig.uuid, Strategy.TYPE_INDEX: f"mig{index}"}
    return _unique(names[strategy] for strategy in strategies)


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sorts gpu2 before gpu10 and 0:2 before 0:10; ``all`` is placed by the caller."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)
