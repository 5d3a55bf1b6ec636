"""The node runtime's size on a node, and the hook's start through it beside the same hook under the
system Python.

Builds the runtime as the DaemonSet's image does (tests/e2e/runtimebuild.py: a chroot of
tests/fetch-rootfs.sh's bookworm-python root; about a minute), or takes one built already
(``--runtime DIR``), and installs it under a scratch prefix. Size: every file of the installed version
(a hard-linked file once), and the disk blocks ``du`` counts (aim: 40 MiB).

Start: the fake "single" node's spec is generated with ``--hook-path PREFIX/current/bin/cdictk-hook``
and nvidia.com/gpu=0 injected into a bundle on an overlay of the Debian minbase image; then,
round-robin, N times each, outside any container with the OCI state on stdin:
- the batch hook through the runtime (its launcher, its loader, its interpreter);
- the same hook, same arguments, under the system Python (``/usr/bin/python3 -I -S
  cdictk/startpath/hooks/__main__.py``, this clone's cdictk: Debian's own build of the same CPython);
- each interpreter's bare start (``-I -S -c pass``), which tells the launcher's cost from the rest.
The ratio of the two hooks' medians is the row's answer (aim: within 10%, 1.10). Needs root.
Usage: python -m bench.noderuntime [--rounds N] [--runtime DIR]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.fakespec import BenchError, node_with_spec
from bench.hooks import injected, row, timed
from cdictk.noderuntime import manifest
from cdictk.noderuntime.install import Target, install
from cdictk.nvcdi.hooks import entry_file
from tests.e2e.conftest import DEBIAN_ROOTFS, FETCH_ROOTFS, ROOTFS_CACHE, minbase, overlay
from tests.e2e.runtimebuild import build_runtime

SIZE_AIM_MIB = 40.0
RATIO_AIM = 1.10
SYSTEM_PYTHON = "/usr/bin/python3"
MIB = 1 << 20


def runtime_size(version: Path) -> tuple[int, int, int]:
    """(bytes of every file, each hard-linked file once; bytes of disk blocks du counts; files)."""
    entries = manifest.read(str(version))[1]
    files = [entry for entry in entries if entry.kind == "f"]
    apparent = (
        sum((version / entry.path).stat().st_size for entry in files) + (version / "MANIFEST").stat().st_size
    )
    blocks = subprocess.run(["du", "-s", "-B1", str(version)], capture_output=True, text=True, check=True)
    return apparent, int(blocks.stdout.split()[0]), len(files) + 1


def parts(version: Path) -> dict[str, int]:
    """Bytes of the runtime's main parts."""
    library = next((version / "lib").glob("python3.*"))
    site = library / "site-packages"

    def total(paths: Iterable[Path]) -> int:
        return sum(path.stat().st_size for path in paths if path.is_file())

    return {
        "interpreter (libexec/python3)": total([version / "libexec" / "python3"]),
        "loader and shared libraries (lib/*.so*)": total((version / "lib").iterdir()),
        "standard library, with its bytecode": total(p for p in library.rglob("*") if site not in p.parents),
        "site-packages (cdictk and its libraries)": total(site.rglob("*")),
        "launcher (bin/, one file)": total([version / "bin" / "python3"]),
    }


def fetch(*suites: str) -> None:
    done = subprocess.run(
        [str(FETCH_ROOTFS), str(ROOTFS_CACHE), *suites], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BenchError(done.stderr.strip())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--runtime", metavar="DIR", help="a runtime built already (python -m cdictk.noderuntime build)"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print(
            "bench/noderuntime.py needs root: the image's chroot, an overlay mount, mknod'd nodes",
            file=sys.stderr,
        )
        return 1
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        print(f"bench/noderuntime.py: {SYSTEM_PYTHON}: no system Python to compare with", file=sys.stderr)
        return 1
    try:
        return bench(args.rounds, args.runtime)
    except BenchError as exc:
        print(f"bench/noderuntime.py: {exc}", file=sys.stderr)
        return 1


def bench(rounds: int, built: str | None) -> int:
    fetch("bookworm", *(() if built else ("bookworm-python",)))
    with tempfile.TemporaryDirectory(prefix="cdictk-bench-noderuntime-") as scratch_name:
        scratch = Path(scratch_name)
        if built is None:
            runtime = build_runtime(minbase("bookworm-python"), scratch / "build", [scratch / "runtime"])[0]
        else:
            runtime = Path(built)
        prefix = scratch / "opt" / "cdictk"
        installed = install(str(runtime), Target(str(prefix)))
        version = prefix / "versions" / installed.runtime_id
        apparent, blocks, count = runtime_size(version)
        sizes = parts(version)
        hook_path = str(prefix / "current" / "bin" / "cdictk-hook")
        _, spec_dir = node_with_spec(scratch, "single", "--hook-path", hook_path)
        with contextlib.ExitStack() as mounts:
            rootfs = mounts.enter_context(overlay(DEBIAN_ROOTFS, scratch / "overlay"))
            bundle = scratch / "bundle"
            bundle.mkdir()
            config = injected([sys.executable, "-m", "cdictk"], spec_dir, bundle / "config.json", rootfs)
            (hook,) = config["hooks"]["createContainer"]
            state = json.dumps({"ociVersion": "1.0.2", "id": "bench", "bundle": str(bundle)}).encode()
            through = [hook["path"], *hook["args"][1:]]
            system = [SYSTEM_PYTHON, "-I", "-S", entry_file(), *hook["args"][1:]]
            launcher = str(prefix / "current" / "bin" / "python3")
            commands: dict[str, Callable[[], float]] = {
                "hook through the runtime": lambda: timed(through, state),
                "hook under the system Python": lambda: timed(system, state),
                "runtime: python3 -I -S -c pass": lambda: timed([launcher, "-I", "-S", "-c", "pass"]),
                "system: python3 -I -S -c pass": lambda: timed([SYSTEM_PYTHON, "-I", "-S", "-c", "pass"]),
            }
            for measure in commands.values():  # the page cache warm, the hook's first changes made
                measure()
                measure()
            times: dict[str, list[float]] = {label: [] for label in commands}
            for _ in range(rounds):
                for label, measure in commands.items():
                    times[label].append(measure())

    print(f"node runtime {installed.runtime_id} ({runtime}), installed under a scratch prefix")
    size = apparent / MIB
    met = "met" if size <= SIZE_AIM_MIB else "missed"
    print(
        f"  size: {size:.1f} MiB in {count} files, {blocks / MIB:.1f} MiB of disk "
        f"(aim <= {SIZE_AIM_MIB:.0f} MiB: {met})"
    )
    for name, value in sizes.items():
        print(f"    {name:<44} {value / MIB:>6.1f} MiB")
    print(f"hook: {hook_path} {hook['args'][1]} ... ; system Python: {SYSTEM_PYTHON} -I -S {entry_file()}")
    print(f"rootfs: overlay of {DEBIAN_ROOTFS}; {rounds} rounds, round-robin, state on stdin")
    print(f"  {'':<42} {'median ms':>9} {'best ms':>8}")
    for label, samples in times.items():
        print(row(label, samples))
    ratio = statistics.median(times["hook through the runtime"]) / statistics.median(
        times["hook under the system Python"]
    )
    start = statistics.median(times["runtime: python3 -I -S -c pass"]) - statistics.median(
        times["system: python3 -I -S -c pass"]
    )
    print(f"hook through the runtime / under the system Python: {ratio:.2f} (aim <= {RATIO_AIM:.2f}: "
          f"{'met' if ratio <= RATIO_AIM else 'missed'})")  # fmt: skip
    print(f"the launcher and the bundled loader add {start:+.1f} ms to a bare interpreter start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
