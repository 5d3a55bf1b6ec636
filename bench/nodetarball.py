"""The node tarball's size, and what its install costs on a node: ``make node-tarball``'s tarball
(``--tarball FILE``; default: the one in build/) unpacked and installed on busybox-only nodes, the
README's way, each step timed as a whole process:

- ``tar xzf`` by the node's busybox;
- ``./cdictk-node-VERSION/bin/cdictk system install --runtime containerd`` the first time (the
  runtime copied and fsync'ed file by file, its self-test, the links, the units, the engine's config);
- the same again (the version there and intact: checked, not copied; every other step again);
- ``cdictk system uninstall``.

Each round is a fresh node (tests/e2e/runtimebuild.py's private mount namespace on a busybox root,
with a ``systemctl`` that does nothing); medians of N rounds. Needs root and busybox-static.
Usage: python -m bench.nodetarball [--rounds N] [--tarball FILE]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.conftest import build_busybox_rootfs, busybox_problem
from tests.e2e.runtimebuild import node_run

MIB = 1 << 20
STEPS = ("unpack (busybox tar xzf)", "install, first", "install again, same version", "uninstall")


def one_node(work: Path, tarball: Path) -> list[float]:
    """A fresh busybox node in ``work``: each step's seconds, in the order of STEPS."""
    build_busybox_rootfs(work)
    systemctl = work / "usr" / "local" / "sbin" / "systemctl"
    systemctl.parent.mkdir(parents=True)
    systemctl.write_text("#!/bin/sh\nexit 0\n")
    systemctl.chmod(0o755)
    shutil.copy(tarball, work / "root")
    top = tarball.name.rsplit("-", 1)[0]  # cdictk-node-VERSION, less -ARCH.tar.gz
    install = f"cd /root && ./{top}/bin/cdictk system install --runtime containerd"
    commands = (f"cd /root && tar xzf {tarball.name}", install, install, "cdictk system uninstall")
    seconds = []
    for command in commands:
        started = time.monotonic()
        done = node_run(work, ["/bin/sh", "-c", command])
        seconds.append(time.monotonic() - started)
        if done.returncode != 0:
            raise SystemExit(f"{command}: status {done.returncode}: {done.stderr.strip()}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--tarball", type=Path, help="default: build/cdictk-node-*.tar.gz (make node-tarball)"
    )
    args = parser.parse_args()
    tarball = args.tarball or next(iter(sorted(Path("build").glob("cdictk-node-*.tar.gz"))), None)
    if tarball is None or not tarball.is_file():
        print("no node tarball: make node-tarball, or --tarball FILE", file=sys.stderr)
        return 1
    problem = busybox_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    print(f"{tarball}: {tarball.stat().st_size / MIB:.1f} MiB")
    rounds: list[list[float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-nodetarball-") as scratch:
        for index in range(args.rounds):
            rounds.append(one_node(Path(scratch) / f"node{index}", tarball))
            shutil.rmtree(Path(scratch) / f"node{index}")
    print(f"{'step':<30} {'median':>8} {'min':>8} {'max':>8}   ({args.rounds} rounds, a fresh node each)")
    for index, step in enumerate(STEPS):
        times = [each[index] for each in rounds]
        print(f"{step:<30} {statistics.median(times):>7.2f}s {min(times):>7.2f}s {max(times):>7.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
