"""``GetPreferredAllocation``: which of the available devices a container should get.

Whole GPUs without replicas: the set of the size asked for, holding the devices that must be in it,
whose pairs are best connected (the sum of :func:`cdictk.node.nvmlwatch.pair_score`: 100 per
NVLink, then one PCIe switch over one NUMA node over across CPUs), as NVIDIA's best-effort policy
scores them; among sets that score the same, the one that leaves the best-connected devices behind
for the next pod, then the lowest GPU indices. Every set is scored when there are at most
:data:`EXHAUSTIVE` of them (C(8,4) is 70, C(16,8) 12,870), else greedily: the best-connected pair
first (unless devices must be in), then each next device the one best connected to those chosen.

Replicas and MIG devices: spread over GPUs, as NVIDIA's ``distributed`` policy: each next device
from the GPU with the fewest of its replicas in use, then the one this request took fewest from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from cdictk.deviceplugin.resources import PluginDevice, Resource

EXHAUSTIVE = 20_000
Links = Mapping[frozenset[str], int]


def preferred(
    resource: Resource, available: Sequence[str], must_include: Sequence[str], size: int, links: Links
) -> list[str]:
    """The device IDs to give (``must_include`` first); fewer than ``size`` only when fewer are known."""
    known = {device.id: device for device in resource.devices}
    required = [device_id for device_id in dict.fromkeys(must_include) if device_id in known]
    candidates = [
        device_id
        for device_id in dict.fromkeys(available)
        if device_id in known and device_id not in required
    ]
    needed = size - len(required)
    if needed <= 0:
        return required[:size]
    whole = resource.replicas == 1 and not any(known[d].is_mig for d in candidates + required)
    if whole:
        chosen = _best_connected([known[d] for d in required], [known[d] for d in candidates], needed, links)
    else:
        chosen = _distributed(resource, [known[d] for d in required], [known[d] for d in candidates], needed)
    return required + [device.id for device in chosen]


def set_score(devices: Sequence[PluginDevice], links: Links) -> int:
    return sum(links.get(frozenset((a.uuid, b.uuid)), 0) for a, b in itertools.combinations(devices, 2))


def _best_connected(
    required: list[PluginDevice], candidates: list[PluginDevice], needed: int, links: Links
) -> list[PluginDevice]:
    candidates = sorted(candidates, key=lambda device: device.gpu_index)
    if needed >= len(candidates):
        return candidates
    if math.comb(len(candidates), needed) > EXHAUSTIVE:
        chosen: list[PluginDevice] = []
        if not required and needed >= 2:
            # A lone device scores nothing: start from the best-connected pair, not GPU 0.
            pairs = [(a, b) for n, a in enumerate(candidates) for b in candidates[n + 1 :]]
            seed = max(pairs, key=lambda p: (set_score(p, links), -p[0].gpu_index, -p[1].gpu_index))
            chosen = list(seed)
        for _ in range(needed - len(chosen)):
            rest = [device for device in candidates if device not in chosen]
            chosen.append(
                max(
                    rest,
                    key=lambda device: (set_score([*required, *chosen, device], links), -device.gpu_index),
                )
            )
        return chosen
    best: tuple[int, int, tuple[int, ...]] | None = None
    best_set: tuple[PluginDevice, ...] = ()
    for combination in itertools.combinations(candidates, needed):
        left = [device for device in candidates if device not in combination]
        key = (
            set_score([*required, *combination], links),
            set_score(left, links),
            tuple(-device.gpu_index for device in combination),
        )
        if best is None or key > best:
            best, best_set = key, combination
    return list(best_set)


def _distributed(
    resource: Resource, required: list[PluginDevice], candidates: list[PluginDevice], needed: int
) -> list[PluginDevice]:
    total: dict[str, int] = {}
    for device in resource.devices:
        total[device.gpu_uuid] = total.get(device.gpu_uuid, 0) + 1
    free: dict[str, int] = {}
    for device in candidates:
        free[device.gpu_uuid] = free.get(device.gpu_uuid, 0) + 1
    taken: dict[str, int] = {}
    for device in required:
        taken[device.gpu_uuid] = taken.get(device.gpu_uuid, 0) + 1
    chosen: list[PluginDevice] = []
    pool = list(candidates)
    for _ in range(min(needed, len(pool))):
        pick = min(
            pool,
            key=lambda d: (total[d.gpu_uuid] - free[d.gpu_uuid], taken.get(d.gpu_uuid, 0), d.gpu_index, d.id),
        )
        pool.remove(pick)
        chosen.append(pick)
        free[pick.gpu_uuid] -= 1
        taken[pick.gpu_uuid] = taken.get(pick.gpu_uuid, 0) + 1
    return chosen
