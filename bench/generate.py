"""Whole-process `cdictk cdi generate` on the fake GPU nodes, against a bare interpreter start.

Builds the "single" and "eight" presets (and 16 and 32 full GPUs for the scaling line) under a temp dir,
then times the installed `cdictk` console script writing a fresh spec, N times each, round-robin. Prints
median and best in ms, the ratio to the 200 ms budget (the eight-GPU node within it), the cost
per device, and the cost per driver library (the one-GPU node again with 64 more driver libraries beside
its own). Needs root (the nodes are mknod'd). With ``--nvidia-ctk PATH`` (NVIDIA's, built ad hoc from its
source), both generators also run on each node in the same loop, each wrapped alike in the private mount
namespace where nvidia-ctk sees the node's /proc/driver and sysfs (bench/compare_generate.py's view), and
the ratio is printed (the budget: faster than nvidia-ctk on the 32-GPU node).
Usage: python -m bench.generate [--repeat N] [--nvidia-ctk PATH]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench.compare_generate import COMMON_ARGS, node_view
from tests.fakenode.node import BUSES, LIBRARIES, PRESETS, Preset, _stub, build_node, fake_gpu

AIM_MS = 200.0  # the eight-GPU node's budget
EXTRA_LIBRARIES = 64  # driver libraries added to the one-GPU node for the per-library line


def timed(command: list[str], repeat: int, before: str | None = None) -> list[float]:
    times = []
    for _ in range(repeat):
        if before is not None and os.path.exists(before):
            os.unlink(before)
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append((time.perf_counter() - start) * 1000)
    return times


def interpreter_of(script: str) -> str:
    """The Python a console script runs (its #! line), so that the floor is measured on the same one."""
    with open(script, "rb") as handle:
        first = handle.readline().decode().strip()
    return first[2:].split()[0] if first.startswith("#!") else sys.executable


def many_gpus(count: int) -> Preset:
    buses = [*BUSES, *range(0xE0, 0xE0 + count)]
    return dataclasses.replace(
        PRESETS["single"], name=f"{count} GPUs", gpus=tuple(fake_gpu(i, buses[i]) for i in range(count))
    )


def add_libraries(lib_dir: str, version: str, count: int, cache: str) -> None:
    """``count`` more driver libraries (libnvidia-bench<i>.so.<version>, real stubs with a SONAME, and
    their SONAME links) beside the node's own."""
    gcc = shutil.which("gcc") or sys.exit("bench/generate.py: gcc is needed for the fake node's libraries")
    for index in range(count):
        soname = f"libnvidia-bench{index}.so.1"
        _stub(soname, os.path.join(lib_dir, f"libnvidia-bench{index}.so.{version}"), cache, gcc)
        os.symlink(f"libnvidia-bench{index}.so.{version}", os.path.join(lib_dir, soname))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--nvidia-ctk", metavar="PATH", help="NVIDIA's generator, for its rows")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print(
            "bench/generate.py needs root: the fake nodes' device nodes are made with mknod", file=sys.stderr
        )
        return 1
    cdictk = shutil.which("cdictk") or sys.exit("the cdictk console script is not on PATH (pip install .)")
    python = interpreter_of(cdictk)
    presets = (PRESETS["single"], PRESETS["eight"], many_gpus(16), many_gpus(32))
    with tempfile.TemporaryDirectory(prefix="cdictk-bench-") as scratch:
        cache = os.path.join(scratch, "cache")
        output = os.path.join(scratch, "out", "nvidia.yaml")
        commands = {"floor": [python, "-c", "pass"]}
        viewed: dict[str, tuple[list[str], list[str]]] = {}  # preset: (cdictk, nvidia-ctk) in the view
        more = f"single, +{EXTRA_LIBRARIES} libraries"
        for preset in presets:
            node = build_node(os.path.join(scratch, preset.name.replace(" ", "-")), preset, cache)
            commands[preset.name] = [cdictk, "cdi", "generate", *node.cli_args(), "--output", output]
            if preset.name == "single":
                bigger = build_node(os.path.join(scratch, "more-libraries"), preset, cache)
                add_libraries(bigger.lib_dir, bigger.version, EXTRA_LIBRARIES, cache)
                commands[more] = [cdictk, "cdi", "generate", *bigger.cli_args(), "--output", output]
            if args.nvidia_ctk:
                view, _ = node_view(node)
                theirs = [os.path.abspath(args.nvidia_ctk), "cdi", "generate", "--driver-root", node.root]
                theirs += [*COMMON_ARGS, "--output", output]
                viewed[preset.name] = ([*view, *commands[preset.name]], [*view, *theirs])
        for name, (ours, theirs) in viewed.items():
            commands[f"{name}, in the view: cdictk"] = ours
            commands[f"{name}, in the view: nvidia-ctk"] = theirs
        devices = {}
        for name in [preset.name for preset in presets] + [more]:
            timed(commands[name], 1, before=output)  # warm the page cache
            with open(output, encoding="utf-8") as handle:
                devices[name] = handle.read().count("\n- name: ")
        for name in viewed:
            for who in ("cdictk", "nvidia-ctk"):
                timed(commands[f"{name}, in the view: {who}"], 1, before=output)
        # Round-robin, so that a slow spell of this machine hits every row alike.
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():
                times[name] += timed(command, 1, before=output)
    floor = statistics.median(times.pop("floor"))
    compared = {name: times.pop(name) for name in list(times) if ", in the view: " in name}
    with_more = times.pop(more)
    print(f"{cdictk} runs {python}; {python} -c pass (the floor): {floor:.1f} ms (median of {args.repeat})")
    print(f"{'node':<12} {'devices':>7} {'median ms':>10} {'best ms':>8} {'over floor':>10} {'vs 200 ms':>9}")
    rows = []
    for name, samples in times.items():
        median = statistics.median(samples)
        rows.append((devices[name], median))
        print(
            f"{name:<12} {devices[name]:>7} {median:>10.1f} {min(samples):>8.1f} {median - floor:>10.1f} "
            f"{median / AIM_MS:>8.2f}x"
        )
    # A least-squares line through the (devices, median) points: the per-device cost, less sensitive to
    # one noisy size than the difference of two.
    eight = statistics.median(times["eight"])
    print(f"eight-GPU node: {eight:.1f} ms, budget {AIM_MS:.0f} ms: {'met' if eight <= AIM_MS else 'missed'}")
    slope = statistics.linear_regression([float(d) for d, _ in rows], [m for _, m in rows]).slope
    print(f"growth: {slope:.2f} ms per device (least squares over {len(rows)} sizes)")
    base, more_ms = statistics.median(times["single"]), statistics.median(with_more)
    per_library = (more_ms - base) / EXTRA_LIBRARIES
    print(
        f"{more}: {more_ms:.1f} ms (best {min(with_more):.1f}); growth: {per_library:.3f} ms per driver "
        f"library ({len(LIBRARIES)} + {EXTRA_LIBRARIES})"
    )
    if compared:
        print(f"\nagainst {args.nvidia_ctk}, both in the same private mount namespace wrapper:")
        print(f"{'node':<12} {'cdictk ms':>10} {'nvidia-ctk ms':>14} {'ratio':>6}  aim")
        for preset in presets:
            mine = statistics.median(compared[f"{preset.name}, in the view: cdictk"])
            nvidias = statistics.median(compared[f"{preset.name}, in the view: nvidia-ctk"])
            verdict = ""
            if preset.name == "32 GPUs":
                verdict = f"< 1x: {'met' if mine < nvidias else 'missed'}"
            print(f"{preset.name:<12} {mine:>10.1f} {nvidias:>14.1f} {mine / nvidias:>6.2f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
