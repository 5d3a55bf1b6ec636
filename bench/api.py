"""The library API's figures on the fake eight-GPU node, in process.

- a two-device claim's spec (GPU 1 and MIG device 0:1) built and written from warm discovery (aim
  2 ms), median and 90th percentile of ``--repeat`` claims;
- 1,000 claims built, written and removed (aim 2 s);
- ``gc`` over 10,000 claim specs: 100 stale among them, and all 10,000 stale (aim 1 s);
- how long ``SpecDirs`` takes to see a new, a changed and a removed spec among 1,000 (aim 1 s), and
  how many files it parsed again for each.

The spec dir is on tmpfs (``/dev/shm``, as ``/var/run/cdi`` is on a node) unless ``--spec-root``
names another place: on a disk the fsyncs of each write dominate. Needs root (the fake node's
device nodes are made with mknod).
Usage: python -m bench.api [--repeat N] [--spec-root DIR]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from cdictk.api import NodeSpecs, SpecDirs, TransientSpecs
from tests.fakenode.node import build_node

TWO = ["1", "0:1"]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def verdict(value: float, aim: float) -> str:
    return f"aim {aim:g} s: {'met' if value <= aim else 'MISSED'}"


def claim_latency(node: NodeSpecs, store: TransientSpecs, repeat: int) -> None:
    times = []
    for n in range(repeat):
        uid = f"latency-{n}"
        start = time.perf_counter()
        store.write(uid, node.claim_spec(uid, TWO))
        times.append(time.perf_counter() - start)
    for n in range(repeat):
        store.remove(f"latency-{n}")
    times.sort()
    median, p90 = statistics.median(times), times[int(len(times) * 0.9)]
    aim = verdict(median, 0.002)
    print(f"two-device claim spec, build + write: median {ms(median)}, p90 {ms(p90)}  ({aim})")


def thousand_claims(node: NodeSpecs, store: TransientSpecs) -> None:
    start = time.perf_counter()
    for n in range(1000):
        uid = f"bulk-{n}"
        store.write(uid, node.claim_spec(uid, TWO))
    written = time.perf_counter() - start
    for n in range(1000):
        store.remove(f"bulk-{n}")
    total = time.perf_counter() - start
    print(
        f"1,000 claims built + written + removed: {total:.2f} s "
        f"(writes {written:.2f} s, removes {total - written:.2f} s)  ({verdict(total, 2.0)})"
    )


def fill(node: NodeSpecs, store: TransientSpecs, count: int) -> list[str]:
    """``count`` claim specs as write() makes them, copied byte for byte (the setup is not timed)."""
    store.write("template", node.claim_spec("template", TWO))
    with open(store.path("template"), "rb") as handle:
        data = handle.read()
    store.remove("template")
    uids = [f"claim-{n:05d}" for n in range(count)]
    for uid in uids:
        with open(store.path(uid), "wb") as handle:
            handle.write(data.replace(b"template", uid.encode()))
    return uids


def gc_figures(node: NodeSpecs, store: TransientSpecs) -> None:
    uids = fill(node, store, 10_000)
    start = time.perf_counter()
    removed = store.gc(uids[100:])
    some = time.perf_counter() - start
    assert len(removed) == 100
    fill(node, store, 10_000)
    start = time.perf_counter()
    removed = store.gc([])
    every = time.perf_counter() - start
    assert len(removed) == 10_000
    print(f"gc over 10,000 claim specs, 100 stale: {ms(some)}  ({verdict(some, 1.0)})")
    print(f"gc over 10,000 claim specs, all stale: {ms(every)}  ({verdict(every, 1.0)})")


def seen_after(cache: SpecDirs, change: Callable[[], None], present: str, wanted: bool) -> float:
    """Seconds from the end of ``change`` (in another thread, as another process would) to the first
    ``cache.devices()`` that shows it, calls made back to back."""
    done = threading.Event()
    finished: list[float] = []

    def run() -> None:
        change()
        finished.append(time.perf_counter())
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    done.wait()
    while (present in cache.devices()) != wanted:
        if time.perf_counter() - finished[0] > 5:
            raise SystemExit("SpecDirs did not see the change within 5 s")
    seen = time.perf_counter()
    thread.join()
    return seen - finished[0]


def cache_figures(node: NodeSpecs, store: TransientSpecs) -> None:
    fill(node, store, 1000)
    start = time.perf_counter()
    cache = SpecDirs([store.spec_dir])
    print(f"SpecDirs over 1,000 claim specs: first scan {ms(time.perf_counter() - start)}")
    rows = []
    for label, uid, devices, name, wanted in (
        ("new", "fresh", TWO, "nvidia.com/gpu=fresh-0:1", True),
        ("changed", "claim-00007", ["2"], "nvidia.com/gpu=claim-00007-2", True),
        ("removed", "claim-00008", [], "nvidia.com/gpu=claim-00008-1", False),
    ):
        reads = cache.reads

        def change(uid: str = uid, devices: list[str] = devices) -> None:
            if devices:
                store.write(uid, node.claim_spec(uid, devices))
            else:
                store.remove(uid)

        latency = seen_after(cache, change, name, wanted)
        rows.append((label, latency, cache.reads - reads))
    cache.close()
    for label, latency, reads in rows:
        print(
            f"SpecDirs sees a {label} spec after {ms(latency)}, {reads} file(s) parsed again  "
            f"({verdict(latency, 1.0)})"
        )
    store.gc([])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--spec-root", default="/dev/shm")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/api.py needs root: the fake node's device nodes are made with mknod", file=sys.stderr)
        return 1
    with (
        tempfile.TemporaryDirectory(prefix="cdictk-bench-api-") as scratch,
        tempfile.TemporaryDirectory(prefix="cdictk-bench-api-", dir=args.spec_root) as spec_root,
    ):
        os.chmod(spec_root, 0o755)  # noqa: S103 - a spec dir is world-readable, as /var/run/cdi
        fake = build_node(os.path.join(scratch, "node"), "eight", os.path.join(scratch, "stubs"))
        node = NodeSpecs(fake.root, proc_root=fake.proc, sys_root=fake.sys)
        start = time.perf_counter()
        node.common_edits()
        print(f"discovery of the eight-GPU node (once): {ms(time.perf_counter() - start)}")
        store = TransientSpecs(os.path.join(spec_root, "cdi"))
        filesystem = subprocess.run(
            ["stat", "-f", "-c", "%T", spec_root], capture_output=True, text=True, check=False
        ).stdout.strip()
        cpus = os.cpu_count()
        print(f"spec dir: {store.spec_dir} ({filesystem}); {cpus} CPUs, shared: figures are indicative")
        claim_latency(node, store, args.repeat)
        thousand_claims(node, store)
        gc_figures(node, store)
        cache_figures(node, store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
