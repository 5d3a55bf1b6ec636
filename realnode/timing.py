"""Container start times: variants interleaved round by round (a slow spell hits every variant alike),
medians; and a burst of GPU containers started several at a time.

Each start is a whole ``runc run`` of a fresh bundle (its rootfs a linked copy, made untimed), deleted
after, untimed. The configs are injected once and reused with each round's rootfs.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from realnode.containers import Containers
from realnode.steps import Recorder, Result, Row, StepFailed

RESERVE = 60.0  # seconds of the budget kept for what follows the timing rounds


def interleaved(
    recorder: Recorder, row: Row, containers: Containers, configs: Mapping[str, dict[str, Any]], rounds: int
) -> dict[str, list[float]]:
    """``rounds`` rounds (after one to warm up) of a start of each config, in turn; returns the ms of
    each start per config. Stops early, saying so, when the budget runs short."""
    samples: dict[str, list[float]] = {label: [] for label in configs}
    for number in range(rounds + 1):
        if number > 1 and recorder.left() < RESERVE:
            row.data["stopped_early"] = (
                f"after {number - 1} rounds: {recorder.left():.0f} s of the budget left"
            )
            break
        for label, config in configs.items():

            def config_for(rootfs: str, config: dict[str, Any] = config) -> dict[str, Any]:
                made = copy.deepcopy(config)
                made["root"]["path"] = rootfs
                return made

            bundle, container = containers.bundle("time", config_for)
            result = containers.run(bundle, container, timeout=60)
            if not result.ok:
                recorder.fail(row, result, f"{label}, round {number}: {result.why()}")
            if number:
                samples[label].append(result.ms)
    return samples


def added(samples: Mapping[str, list[float]], base: str) -> dict[str, dict[str, float]]:
    """Per variant: median, best, and the median over ``base``'s median."""
    floor = statistics.median(samples[base])
    return {
        label: {
            "median_ms": round(statistics.median(times), 2),
            "best_ms": round(min(times), 2),
            "added_ms": round(statistics.median(times) - floor, 2),
            "rounds": len(times),
        }
        for label, times in samples.items()
        if times
    }


def burst(
    recorder: Recorder, row: Row, containers: Containers, config: dict[str, Any], *, total: int, parallel: int
) -> dict[str, Any]:
    """``total`` containers of ``config``, ``parallel`` at a time: failures and wall time."""

    def config_for(rootfs: str) -> dict[str, Any]:
        made = copy.deepcopy(config)
        made["root"]["path"] = rootfs
        return made

    prepared = [containers.bundle("burst", config_for) for _ in range(total)]
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results: list[Result] = list(
            pool.map(lambda made: containers.run(made[0], made[1], timeout=120), prepared)
        )
    wall = time.monotonic() - began
    failed = [result for result in results if not result.ok]
    summary: dict[str, Any] = {
        "containers": total,
        "parallel": parallel,
        "failed": len(failed),
        "total_s": round(wall, 2),
        "median_ms": round(statistics.median(result.ms for result in results), 1),
        "max_ms": round(max(result.ms for result in results), 1),
    }
    if failed:
        summary["first_failure"] = failed[0].why()
        row.tail = failed[0].tail()
    row.data.update(summary)
    row.detail = (
        f"{total - len(failed)}/{total} started and passed, {parallel} at a time, {wall:.1f} s in all; "
        f"each {summary['median_ms']:.0f} ms median, {summary['max_ms']:.0f} ms max"
    )
    if failed:
        raise StepFailed(f"{len(failed)} of {total} failed ({failed[0].why()}); " + row.detail)
    return summary
