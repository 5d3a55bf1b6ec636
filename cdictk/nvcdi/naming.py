"""Device names: ``index`` (0, 0:1), ``uuid`` (GPU-..., MIG-...) and ``type-index`` (gpu0, mig0:1)."""

from __future__ import annotations

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
    """In strategy order, without repeats, and without the UUID name of a device whose UUID is unknown."""
    return [name for name in dict.fromkeys(names) if name]
