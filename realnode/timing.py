"""Container start times: variants interleaved round by round (a slow spell hits every variant alike),
medians; the hook through the node runtime beside the same hook under the node's Python; and a burst of
GPU containers started several at a time.

Each start is a whole ``runc run`` of a fresh bundle (its rootfs a linked copy, made untimed), deleted
after, untimed. The configs are injected once and reused with each round's rootfs. Each round starts
with the next variant in turn, so that none always runs first (after a deletion) or last.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from realnode import imagefs
from realnode.checkstate import State
from realnode.containers import HOST_PATH, Containers, oci_config
from realnode.gpuways import injected
from realnode.recorder import Recorder, Result, Row, StepFailed, StepSkipped

RESERVE = 60.0  # seconds of the budget kept for what follows the timing rounds
FEW = 20  # rounds below which the medians are a first look, not a figure to quote (the issue asks 20)


def interleaved(
    recorder: Recorder, row: Row, containers: Containers, configs: Mapping[str, dict[str, Any]], rounds: int
) -> dict[str, list[float]]:
    """``rounds`` rounds (after one to warm up) of a start of each config, in turn; returns the ms of
    each start per config. Stops early, saying so, when the budget runs short."""
    samples: dict[str, list[float]] = {label: [] for label in configs}
    labels = list(configs)
    for number in range(rounds + 1):
        if number > 1 and recorder.left() < RESERVE:
            row.data["stopped_early"] = (
                f"after {number - 1} of {rounds} rounds: {recorder.left():.0f} s of the budget left"
            )
            break
        shift = number % len(labels)
        for label in labels[shift:] + labels[:shift]:

            def config_for(rootfs: str, config: dict[str, Any] = configs[label]) -> dict[str, Any]:
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
    """Per variant: median, best, quartiles (how far one start strays), and the median over
    ``base``'s median."""
    floor = statistics.median(samples[base])
    figures = {}
    for label, times in samples.items():
        if not times:
            continue
        low, _, high = statistics.quantiles(times, n=4) if len(times) > 1 else (times[0],) * 3
        figures[label] = {
            "median_ms": round(statistics.median(times), 2),
            "best_ms": round(min(times), 2),
            "p25_ms": round(low, 2),
            "p75_ms": round(high, 2),
            "added_ms": round(statistics.median(times) - floor, 2),
            "rounds": len(times),
        }
    return figures


def ratio(figures: Mapping[str, Mapping[str, float]], ours: str, theirs: str) -> float | None:
    """``ours``'s added milliseconds over ``theirs``'s; None where either is missing or ``theirs``
    adds nothing (a ratio over zero or a negative time says nothing)."""
    if ours not in figures or theirs not in figures or figures[theirs]["added_ms"] <= 0:
        return None
    return round(figures[ours]["added_ms"] / figures[theirs]["added_ms"], 2)


def describe(
    figures: Mapping[str, Mapping[str, float]], base: str, names: Mapping[str, str], asked: int
) -> str:
    """The row's one line: the base's median and spread, what each variant (``names``: label -> short
    name) adds, cdictk's over NVIDIA's, and a warning when the rounds are too few to quote."""
    rounds = min(int(figure["rounds"]) for figure in figures.values())
    spread = figures[base]["p75_ms"] - figures[base]["p25_ms"]
    parts = [f"{names[base]} {figures[base]['median_ms']:.1f} ms (quartiles {spread:.1f} ms apart)"]
    parts += [
        f"{short} {figures[label]['added_ms']:+.1f} ms"
        for label, short in names.items()
        if label != base and label in figures
    ]
    labels = [label for label in names if label != base]
    found = ratio(figures, *labels[:2]) if len(labels) >= 2 else None
    if found is not None:
        parts.append(f"{names[labels[0]]}/{names[labels[1]]} {found:.2f}")
    text = f"medians of {rounds} rounds: " + ", ".join(parts)
    if rounds < asked:
        text += f"; stopped after {rounds} of {asked} rounds (budget)"
    if rounds < FEW:
        text += f"; under {FEW} rounds: a first look, not a figure to quote"
    return text


def burst(
    recorder: Recorder, row: Row, containers: Containers, config: dict[str, Any], *, total: int, parallel: int
) -> dict[str, Any]:
    """``total`` containers of ``config``, ``parallel`` at a time: failures and wall time. The wall
    time counts the runs alone (each ``runc run`` to its container's exit); they are deleted after."""

    def config_for(rootfs: str) -> dict[str, Any]:
        made = copy.deepcopy(config)
        made["root"]["path"] = rootfs
        return made

    prepared = [containers.bundle("burst", config_for) for _ in range(total)]
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            results: list[Result] = list(
                pool.map(lambda made: containers.run(made[0], made[1], timeout=120, delete=False), prepared)
            )
        wall = time.monotonic() - began
    finally:
        for _, container in prepared:
            containers.delete(container)
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
        f"each run (start, the program, exit) {summary['median_ms']:.0f} ms median, "
        f"{summary['max_ms']:.0f} ms max"
    )
    if failed:
        raise StepFailed(f"{len(failed)} of {total} failed ({failed[0].why()}); " + row.detail)
    return summary


def bare_starts(recorder: Recorder, pythons: Mapping[str, str], rounds: int) -> dict[str, float]:
    """Each Python's start alone (``-I -S -c pass``, the whole process), ``rounds`` rounds after one to
    warm up, in turn as the containers are; the median ms of each."""
    times: dict[str, list[float]] = {label: [] for label in pythons}
    labels = list(pythons)
    for number in range(rounds + 1):
        shift = number % len(labels)
        for label in labels[shift:] + labels[:shift]:
            command: Sequence[str] = [pythons[label], "-I", "-S", "-c", "pass"]
            result = recorder.run(command, 20, env={"PATH": HOST_PATH}, quiet=True)
            if not result.ok:
                raise StepFailed(f"{label}: {result.why()}")
            if number:
                times[label].append(result.ms)
    return {label: round(statistics.median(found), 2) for label, found in times.items()}


def runtime_timing(recorder: Recorder, args: argparse.Namespace, state: State) -> None:
    """Container starts with cdictk's hook through the node runtime and under the node's Python
    (the venv's), interleaved with starts without a GPU; both interpreters' bare start; the runtime's
    size on the node."""
    with recorder.step(f"node runtime: start time, {args.rounds} rounds") as row:
        recorder.need(40)
        runtime = state.runtime
        if state.containers is None or not state.runs:
            raise StepSkipped("needs the image and a runc that runs")
        if runtime is None or "runtime" not in state.loaded:
            raise StepSkipped("needs the node runtime and its spec")
        base, ours, theirs = "no GPU", "cdictk's hook, node runtime", "cdictk's hook, node's Python"
        configs = {
            base: oci_config("/", ["/bin/true"]),
            ours: injected(recorder, state, "runtime", ["/bin/true"]),
        }
        if "cdictk" in state.loaded:
            configs[theirs] = injected(recorder, state, "cdictk", ["/bin/true"])
        samples = interleaved(recorder, row, state.containers, configs, args.rounds)
        figures = added(samples, base)
        node_python = state.venv.base if state.venv is not None else sys.executable
        bare = bare_starts(
            recorder, {"node runtime": runtime.current("python3"), "node's Python": node_python}, args.rounds
        )
        report: dict[str, Any] = dict(figures)
        found = ratio(figures, ours, theirs)
        if found is not None:
            report["ratio_runtime_over_python"] = {"added": found}
        report["bare_start_ms"] = {**bare, "node's Python is": node_python}
        report["size"] = {"bytes": runtime.size, "files": runtime.files}
        row.data["figures"] = report
        recorder.sections.setdefault("node_runtime", {})["timing"] = report
        names = {base: "no GPU", ours: "node runtime", theirs: "node's Python"}
        bare_said = ", ".join(f"{label} {ms:.1f} ms" for label, ms in bare.items())
        row.detail = (
            f"{describe(figures, base, names, args.rounds)}; bare start (-I -S -c pass): {bare_said}; "
            f"{runtime.size / (1 << 20):.1f} MiB on the node"
        )


def run_timing(recorder: Recorder, args: argparse.Namespace, state: State) -> None:
    labels = {"none": "no GPU", "cdictk": "cdictk's spec + hook", "nvidia": "NVIDIA's spec + hooks"}
    with recorder.step(f"start time, {args.rounds} rounds interleaved") as row:
        recorder.need(40)
        if state.containers is None or not state.runs:
            raise StepSkipped("needs the image and a runc that runs")
        configs = {labels["none"]: oci_config("/", ["/bin/true"])}
        for spec in ("cdictk", "nvidia"):
            if spec in state.loaded:
                configs[labels[spec]] = injected(recorder, state, spec, ["/bin/true"])
        samples = interleaved(recorder, row, state.containers, configs, args.rounds)
        figures = added(samples, labels["none"])
        names = {labels["none"]: "no GPU", labels["cdictk"]: "cdictk", labels["nvidia"]: "NVIDIA"}
        row.detail = describe(figures, labels["none"], names, args.rounds)
        report: dict[str, Any] = dict(figures)
        found = ratio(figures, labels["cdictk"], labels["nvidia"])
        if found is not None:
            report["ratio_cdictk_over_nvidia"] = {"added": found}
        row.data["figures"] = report
        recorder.sections["timing"] = report
    runtime_timing(recorder, args, state)
    with recorder.step(f"burst: {args.burst} GPU containers, {args.parallel} at a time") as row:
        recorder.need(40)
        if state.containers is None or not state.runs or "cdictk" not in state.loaded:
            raise StepSkipped("needs the image, a runc that runs and cdictk's spec")
        config = injected(recorder, state, "cdictk", [f"{imagefs.PROGRAM_DIR}/cuda-probe", "--dlopen"])
        recorder.sections["burst"] = burst(
            recorder, row, state.containers, config, total=args.burst, parallel=args.parallel
        )
