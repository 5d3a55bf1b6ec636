"""The device plugin's own figures: how soon a start answers, and how fast its calls are, on the fake
eight-GPU node against the kubelet stand-in (tests/e2e/kubelet), each start a new
``cdictk device-plugin`` process (health checks on, the node's spec checked):

- first answer: from the process's start to the stand-in's ``Register``, and to the first
  ``ListAndWatch`` list; the median and best of ``--starts`` starts;
- the first ``GetPreferredAllocation`` asked the moment that list came ("2 devices including GPU 5"
  of the whole GPUs): how long it took, and in how many starts it was GPU 5's NVLink pair (4, 5);
- ``Allocate`` of one GPU and ``GetPreferredAllocation`` of 2 of 7: median and 90th percentile of
  ``--calls`` calls back to back on the kubelet's connection, spread over the starts, with only the
  kubelet's stream open; then as many in the last start with a peer holding 32 more (an answer that
  does not come within 5 s is said so).

With ``--against DIR``, the plugin of another checkout (``git archive main | tar -x -C DIR``) is
started too, start for start in turn with this one, and measured the same way: the figures before
and after a change, under the same load.

Each call is timed with ``time.perf_counter`` around the blocking gRPC call; a start from just before
``Popen`` to the moment the stand-in's thread sees the registration or the list. The machine is
shared: figures are indicative. Needs root (the fake node's device nodes are made with mknod).
Usage: python -m bench.deviceplugin [--starts N] [--calls N] [--against DIR]   (repository root, in
the venv)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.fakespec import BenchError, node_with_spec

if TYPE_CHECKING:
    import grpc

    from tests.e2e.kubelet.kubelet import Kubelet
    from tests.fakenode.node import FakeNode

STARTS = 10
CALLS = 300
PEER_STREAMS = 32
DEADLINE = 5.0  # seconds a timed call may take before the bench calls it unanswered
GPU = "nvidia.com/gpu"


@dataclass
class Figures:
    registered: list[float] = field(default_factory=list)
    listed: list[float] = field(default_factory=list)
    first_preferred: list[float] = field(default_factory=list)
    nvlink_pairs: int = 0
    calls: dict[str, list[float]] = field(default_factory=dict)  # a row's times
    failed: dict[str, str] = field(default_factory=dict)  # a row: why it has no times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=STARTS)
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--against", metavar="DIR", help="another checkout's plugin, measured in turn")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print(
            "bench.deviceplugin: needs root (the fake node's device nodes are made with mknod)",
            file=sys.stderr,
        )
        return 1
    # gRPC imported after its fork handlers are off, as the command has them (see bench/k8s.py)
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    try:
        with tempfile.TemporaryDirectory(prefix="cdictk-bench-dp-") as scratch:
            node, spec_dir = node_with_spec(Path(scratch), "eight")
            trees = {"this checkout": os.getcwd(), **({args.against: args.against} if args.against else {})}
            figures = {name: Figures() for name in trees}
            for start in range(args.starts):
                for name, tree in trees.items():
                    calls = args.calls // args.starts + (start < args.calls % args.starts)
                    last = args.calls if start == args.starts - 1 else 0
                    measure(tree, node, spec_dir, figures[name], calls=calls, peer_calls=last)
    except BenchError as exc:
        print(f"bench.deviceplugin: {exc}", file=sys.stderr)
        return 1
    for name, found in figures.items():
        report(name, found, args.starts, args.calls)
    return 0


def measure(
    tree: str, node: FakeNode, spec_dir: Path, figures: Figures, *, calls: int, peer_calls: int
) -> None:
    """One start of the plugin of the checkout ``tree``: its first answers, ``calls`` calls of each
    row, and with ``peer_calls``, that many while a peer holds its streams open."""
    from tests.e2e.kubelet.kubelet import Kubelet  # noqa: PLC0415 - gRPC (see main)

    whole = [gpu.uuid for gpu in node.preset.gpus if gpu.mig != "enabled"]
    gpu5, gpu4 = node.preset.gpus[5].uuid, node.preset.gpus[4].uuid
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-bench-dp-", dir="/tmp")  # socket paths are short
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    command = [
        sys.executable, "-m", "cdictk", "device-plugin", "--plugin-dir", plugin_dir,
        *node.cli_args(), "--spec-dir", str(spec_dir),
    ]  # fmt: skip
    try:
        began = time.perf_counter()
        with plugin(command, tree) as process:
            wait(kubelet, process, "the registration", lambda k: bool(k.registrations))
            figures.registered.append(time.perf_counter() - began)
            wait(kubelet, process, "the first list", lambda k: bool(k.devices(GPU)))
            figures.listed.append(time.perf_counter() - began)
            asked = time.perf_counter()
            picked = kubelet.preferred(GPU, whole, [gpu5], 2)
            figures.first_preferred.append(time.perf_counter() - asked)
            figures.nvlink_pairs += picked == [gpu5, gpu4]
            time_calls(kubelet, whole, calls, peer_calls, figures)
    finally:
        kubelet.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)


@contextmanager
def plugin(command: list[str], tree: str) -> Iterator[subprocess.Popen[str]]:
    """``command`` run in ``tree``, whose cdictk comes first on the path."""
    env = {**os.environ, "PYTHONPATH": tree}
    process = subprocess.Popen(
        command, cwd=tree, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def wait(
    kubelet: Kubelet, process: subprocess.Popen[str], what: str, predicate: Callable[[Kubelet], bool]
) -> None:
    try:
        kubelet.wait_for(what, predicate, timeout=30)
    except AssertionError as exc:
        process.kill()
        _, stderr = process.communicate()
        raise BenchError(f"no {what} within 30 s: {stderr.strip()}") from exc


def time_calls(kubelet: Kubelet, whole: Sequence[str], calls: int, peer_calls: int, figures: Figures) -> None:
    import grpc  # noqa: PLC0415 - see main

    from cdictk.deviceplugin.proto.deviceplugin_pb2 import (  # noqa: PLC0415
        AllocateRequest,
        ContainerAllocateRequest,
        ContainerPreferredAllocationRequest,
        PreferredAllocationRequest,
    )

    stub = kubelet.endpoints[GPU].stub
    allocate = AllocateRequest(container_requests=[ContainerAllocateRequest(devices_ids=[whole[2]])])
    preferred = PreferredAllocationRequest(
        container_requests=[ContainerPreferredAllocationRequest(available_deviceIDs=whole, allocation_size=2)]
    )
    rows: list[tuple[str, Callable[[], object]]] = [
        ("Allocate, 1 GPU", lambda: stub.Allocate(allocate, timeout=DEADLINE)),
        (
            "GetPreferredAllocation, 2 of 7",
            lambda: stub.GetPreferredAllocation(preferred, timeout=DEADLINE),
        ),
    ]
    for label, call in rows:
        timed(call, calls, figures, label)
    if not peer_calls:
        return
    peer = grpc.insecure_channel(f"unix://{kubelet.endpoints[GPU].socket}")
    try:
        streams, served = open_streams(peer, PEER_STREAMS)
        for label, call in rows:
            key = f"{label}, {PEER_STREAMS} more streams ({served} served)"
            timed(call, peer_calls, figures, key)
        del streams  # open until here: a stream no longer referenced is cancelled
    finally:
        peer.close()


def open_streams(channel: grpc.Channel, count: int) -> tuple[list[Any], int]:
    """``count`` ListAndWatch streams on ``channel``, and how many sent their first list within the
    deadline (a server that ties a worker to each stream serves only so many)."""
    from cdictk.deviceplugin.proto.deviceplugin_pb2 import Empty  # noqa: PLC0415
    from cdictk.deviceplugin.proto.deviceplugin_pb2_grpc import DevicePluginStub  # noqa: PLC0415

    listen = DevicePluginStub(channel).ListAndWatch
    streams = [listen(Empty()) for _ in range(count)]
    # next() has no timeout of its own: read in threads, waited for until the deadline; a read never
    # answered ends with the channel
    pool = futures.ThreadPoolExecutor(count)
    reads = [pool.submit(next, stream) for stream in streams]
    done, _ = futures.wait(reads, timeout=DEADLINE)
    pool.shutdown(wait=False)
    return streams, sum(read.exception() is None for read in done)


def timed(call: Callable[[], object], calls: int, figures: Figures, row: str) -> None:
    """``calls`` calls of ``call`` (one request, its deadline set), each one's time added to ``row``;
    at the first that fails, why, and no more."""
    import grpc  # noqa: PLC0415 - see main

    times = figures.calls.setdefault(row, [])
    for _ in range(calls if row not in figures.failed else 0):
        began = time.perf_counter()
        try:
            call()
        except grpc.RpcError as exc:
            late = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            figures.failed[row] = f"no answer within {DEADLINE:g} s" if late else str(exc)
            return
        times.append(time.perf_counter() - began)


def report(name: str, figures: Figures, starts: int, calls: int) -> None:
    print(f"{name}: cdictk device-plugin on the fake eight-GPU node, {starts} starts; {os.cpu_count()} CPUs")
    for label, values in (
        ("start to Register", figures.registered),
        ("start to the first ListAndWatch list", figures.listed),
        ("first GetPreferredAllocation, asked at once", figures.first_preferred),
    ):
        print(f"  {label:<48} median {ms(statistics.median(values))}, best {ms(min(values))}")
    print(
        f"  first GetPreferredAllocation was GPU 5's NVLink pair in {figures.nvlink_pairs} of {starts} starts"
    )
    print(f"  calls, {calls} of each back to back on the kubelet's connection:")
    for label, row in figures.calls.items():
        if label in figures.failed or not row:
            print(f"    {label:<62} {figures.failed.get(label, 'none made')}")
            continue
        ordered = sorted(row)
        p90 = ordered[int(len(ordered) * 0.9)]
        print(f"    {label:<62} median {ms(statistics.median(row))}, p90 {ms(p90)}")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.1 else f"{seconds:.3f} s"


if __name__ == "__main__":
    sys.exit(main())
