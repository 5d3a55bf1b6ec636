"""GetPreferredAllocation's choice on made-up nodes: whole GPUs by how well they are connected
(NVLinks, then a PCIe switch, then a NUMA node), the devices that must be in, the sizes asked for;
replicas and MIG devices spread over GPUs."""

from __future__ import annotations

import itertools

import pytest

from cdictk.deviceplugin import topology
from cdictk.deviceplugin.resources import PluginDevice, Resource
from cdictk.deviceplugin.topology import Links, preferred, set_score
from cdictk.node.nvmlwatch import NVLINK_SCORE, PCIE_SCORES

SWITCH = PCIE_SCORES[10]  # one PCIe switch between the two
NUMA = PCIE_SCORES[40]  # the same CPU (NUMA node)
ACROSS = PCIE_SCORES[50]  # across CPUs


def gpu(index: int) -> str:
    return f"GPU-{index:08d}-0000-0000-0000-000000000000"


def whole(count: int) -> Resource:
    return Resource("nvidia.com/gpu", tuple(PluginDevice(gpu(i), gpu(i), i, gpu(i)) for i in range(count)))


def node(count: int, nvlinks: dict[tuple[int, int], int] | None = None) -> Links:
    """``count`` GPUs, two per PCIe switch, four per NUMA node, and ``nvlinks`` (pair -> links)."""
    links: dict[frozenset[str], int] = {}
    for a, b in itertools.combinations(range(count), 2):
        score = SWITCH if a // 2 == b // 2 else NUMA if a // 4 == b // 4 else ACROSS
        links[frozenset((gpu(a), gpu(b)))] = score + NVLINK_SCORE * (nvlinks or {}).get((a, b), 0)
    return links


def ids(*indices: int) -> list[str]:
    return [gpu(i) for i in indices]


def choose(resource: Resource, links: Links, size: int, must: list[str] | None = None) -> list[str]:
    return preferred(resource, [d.id for d in resource.devices], must or [], size, links)


def test_nvlinked_gpus_come_first() -> None:
    links = node(8, {(5, 6): 2})  # across two switches, but NVLinked
    assert choose(whole(8), links, 2) == ids(5, 6)
    # more NVLinks beat fewer
    links = node(8, {(5, 6): 2, (1, 7): 4})
    assert choose(whole(8), links, 2) == ids(1, 7)


def test_without_nvlinks_a_pcie_switch_then_a_numa_node() -> None:
    links = node(8)
    assert choose(whole(8), links, 2) == ids(0, 1)
    # GPU 0's switch partner taken: from GPU 0's NUMA node, not across CPUs
    available = ids(0, 2, 4, 6)
    assert preferred(whole(8), available, ids(0), 2, links) == ids(0, 2)
    # four: one whole NUMA node
    assert choose(whole(8), links, 4) == ids(0, 1, 2, 3)
    assert preferred(whole(8), ids(1, 4, 5, 6, 7), [], 4, links) == ids(4, 5, 6, 7)


def test_devices_that_must_be_in_come_first_and_count_in_the_score() -> None:
    links = node(8, {(2, 3): 4, (6, 7): 4})
    assert choose(whole(8), links, 2, ids(7)) == ids(7, 6)
    assert choose(whole(8), links, 3, ids(3, 6)) == ids(3, 6, 2)  # 2 has the NVLinks to 3, and a switch
    # duplicates and unknown IDs are dropped, the order of must_include kept
    assert preferred(whole(8), [*ids(0, 1), "GPU-nope"], [gpu(1), gpu(1), "GPU-nope"], 2, links) == ids(1, 0)


def test_ties_leave_the_best_connected_gpus_for_the_next_pod_then_lowest_indices() -> None:
    # GPUs 0-3: 0 and 1 share an NVLink, so a one-GPU pod gets 2 (the lowest of the rest), not 0
    links = node(4, {(0, 1): 1})
    assert choose(whole(4), links, 1) == ids(2)
    assert choose(whole(4), node(4), 1) == ids(0)


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        (ids(0, 1, 2), [], 3, ids(0, 1, 2)),  # all there are
        (ids(2, 0), [], 5, ids(0, 2)),  # more than there are: those there are, by index
        (ids(0, 1, 2, 3), ids(3, 1), 1, ids(3)),  # fewer than must be in: the first of them
        (ids(0, 1, 2, 3), ids(3, 1), 2, ids(3, 1)),
        (ids(0, 1), [], 0, []),
        ([], [], 2, []),
    ],
    ids=["all", "more-than-there-are", "size-below-must", "size-equal-to-must", "none", "none-available"],
)
def test_sizes(available: list[str], must: list[str], size: int, expected: list[str]) -> None:
    assert preferred(whole(4), available, must, size, node(4)) == expected


def test_unknown_topology_gives_the_lowest_indices() -> None:
    assert preferred(whole(8), ids(6, 2, 4, 3), [], 2, {}) == ids(2, 3)


def test_many_candidates_are_chosen_greedily(monkeypatch: pytest.MonkeyPatch) -> None:
    links = node(8, {(2, 5): 4, (5, 7): 4})
    monkeypatch.setattr(topology, "EXHAUSTIVE", 10)  # C(8,3) = 56 sets: too many now
    # the best pair first (5-7: four NVLinks and one NUMA node), then the one best connected to both
    assert choose(whole(8), links, 3) == ids(5, 7, 2)
    assert choose(whole(8), links, 2, ids(7)) == ids(7, 5)


def test_set_score_sums_every_pair() -> None:
    links = node(4, {(0, 1): 1})
    devices = whole(4).devices
    assert set_score(devices[:2], links) == SWITCH + NVLINK_SCORE
    assert set_score(devices[:3], links) == SWITCH + NVLINK_SCORE + 2 * NUMA
    assert set_score(devices[:1], links) == 0


# ---- replicas and MIG devices: spread over GPUs ---------------------------------------------------


def replicas(gpus: int, each: int) -> Resource:
    devices = tuple(
        PluginDevice(f"{gpu(i)}::{n}", gpu(i), i, gpu(i)) for i in range(gpus) for n in range(each)
    )
    return Resource("nvidia.com/gpu", devices, each)


def gpus_of(chosen: list[str]) -> list[int]:
    return [int(device_id.split("::")[0][4:12]) for device_id in chosen]


def test_replicas_are_spread_over_gpus() -> None:
    resource = replicas(4, 4)
    everything = [d.id for d in resource.devices]
    assert gpus_of(preferred(resource, everything, [], 4, node(4))) == [0, 1, 2, 3]
    assert gpus_of(preferred(resource, everything, [], 6, node(4))) == [0, 1, 2, 3, 0, 1]


def test_replicas_come_from_the_gpus_least_in_use() -> None:
    resource = replicas(3, 4)
    # GPU 0 has three replicas in use, GPU 1 one, GPU 2 none: 2 first, then 1, then 2 again
    free = [f"{gpu(0)}::3", *[f"{gpu(1)}::{n}" for n in (1, 2, 3)], *[f"{gpu(2)}::{n}" for n in range(4)]]
    assert gpus_of(preferred(resource, free, [], 3, {})) == [2, 1, 2]


def test_replicas_must_include_counts_as_taken_by_this_request() -> None:
    resource = replicas(2, 2)
    everything = [d.id for d in resource.devices]
    chosen = preferred(resource, everything, [f"{gpu(0)}::1"], 2, {})
    assert chosen[0] == f"{gpu(0)}::1" and gpus_of(chosen) == [0, 1]


def test_mig_devices_are_spread_over_their_gpus() -> None:
    migs = tuple(
        PluginDevice(f"MIG-{g}{n}", f"MIG-{g}{n}", g, gpu(g), gi=n + 1, ci=0)
        for g in range(2)
        for n in range(3)
    )
    resource = Resource("nvidia.com/mig-1g.10gb", migs)
    chosen = preferred(resource, [d.id for d in migs], [], 3, node(2, {(0, 1): 4}))
    assert chosen == ["MIG-00", "MIG-10", "MIG-01"]
