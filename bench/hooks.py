"""What cdictk's hooks add to a container start, and what the hook entry point costs over a bare Python.

Builds the fake "single" node, generates its spec, and injects nvidia.com/gpu=0 into a bundle whose
rootfs is an overlay of the Debian minbase image (tests/fetch-rootfs.sh's cache). Then, round-robin so
that a slow spell of this machine hits every row alike, N times each:
- ``runc run`` (and ``crun run``) of ``true`` with the spec's createContainer hooks, and with the same
  config less its hooks: the difference is what the hooks add to a container start (aim: 25 ms);
- the batch hook alone, fed the OCI state on stdin, outside any container;
- ``<python> -I -S <site>/cdictk/startpath/hooks/__main__.py noop`` against ``<python> -I -S -c pass``: the
entry
  point's imports over a bare interpreter start (aim: 10 ms);
- with ``--nvidia-cdi-hook PATH`` (NVIDIA's hook program, built ad hoc from its source), the same node's
  spec generated with ``--hook-path PATH`` (NVIDIA's hooks, one process per step) in a bundle on an
  overlay of its own: what NVIDIA's hooks add to the same start, and cdictk's over NVIDIA's (aim: 0.5).
Needs root (mknod'd nodes, the overlay mount, runc). Prints median and best in ms.
Usage: python -m bench.hooks [--rounds N] [--nvidia-cdi-hook PATH]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.fakespec import node_with_spec
from tests.e2e.conftest import DEBIAN_ROOTFS, FETCH_ROOTFS, ROOTFS_CACHE, oci_config, overlay

START_AIM_MS = 25.0
IMPORT_AIM_MS = 10.0
RATIO_AIM = 0.5  # cdictk's hooks add at most half of what NVIDIA's add


def timed(command: list[str], stdin: bytes | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(
        command, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = (time.perf_counter() - start) * 1000
    if result.returncode != 0:
        raise SystemExit(
            f"bench/hooks.py: {' '.join(command[:6])} ... failed: {result.stderr.decode().strip()}"
        )
    return elapsed


def run_quiet(command: list[str]) -> str:
    """Runs ``command``; returns its stderr (a no-op prints nothing)."""
    return subprocess.run(
        command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    ).stderr


def container_run(runtime: str, state_dir: Path, bundle: Path) -> Callable[[], float]:
    def measure() -> float:
        container = f"cdictk-bench-{uuid.uuid4().hex[:12]}"
        return timed([runtime, "--root", str(state_dir), "run", "--bundle", str(bundle), container])

    return measure


def runtimes() -> tuple[list[str], list[str]]:
    """The runtimes to time, and why any is left out."""
    found, notes = [], []
    for name in ("runc", "crun"):
        if shutil.which(name) is None:
            notes.append(f"{name}: not installed (tests/setup-host.sh installs it)")
            continue
        controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
        if name == "crun" and controllers.exists() and controllers.read_text().strip():
            notes.append("crun: hybrid cgroups with controllers on v2 (tests/setup-host.sh fixes that)")
            continue
        found.append(name)
    return found, notes


NVIDIA = "NVIDIA's hooks"


def injected(cdictk: list[str], spec_dir: Path, config_path: Path, rootfs: Path) -> dict[str, Any]:
    """The config of ``true`` on ``rootfs`` with nvidia.com/gpu=0 of the specs in ``spec_dir``."""
    config = oci_config(rootfs, ["true"])
    config["root"]["readonly"] = False  # as engines run containers; crun 1.8 makes it ro before hooks
    config_path.write_text(json.dumps(config))
    subprocess.run(
        [*cdictk, "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "nvidia.com/gpu=0", str(config_path)],
        check=True,
    )
    loaded: dict[str, Any] = json.loads(config_path.read_text())
    return loaded


def write_bundle(path: Path, config: dict[str, Any]) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def row(name: str, samples: list[float]) -> str:
    return f"  {name:<42} {statistics.median(samples):>9.1f} {min(samples):>8.1f}"


def verdict(added: float, aim: float) -> str:
    return f"{added:+.1f} ms (aim <= {aim:.0f} ms: {'met' if added <= aim else 'missed'})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--nvidia-cdi-hook", metavar="PATH", help="NVIDIA's hook program, for its rows")
    args = parser.parse_args()
    nvidia = os.path.abspath(args.nvidia_cdi_hook) if args.nvidia_cdi_hook else None
    if nvidia is not None and not os.access(nvidia, os.X_OK):
        print(f"bench/hooks.py: {nvidia} is not an executable", file=sys.stderr)
        return 1
    if os.geteuid() != 0:
        print("bench/hooks.py needs root: mknod'd device nodes, an overlay mount, runc", file=sys.stderr)
        return 1
    names, notes = runtimes()
    if not names:
        print("bench/hooks.py: " + "; ".join(notes), file=sys.stderr)
        return 1
    fetched = subprocess.run(
        [str(FETCH_ROOTFS), str(ROOTFS_CACHE)], capture_output=True, text=True, check=False
    )
    if fetched.returncode != 0:
        print(fetched.stderr.strip(), file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="cdictk-bench-hooks-") as scratch_name:
        scratch = Path(scratch_name)
        node, spec_dir = node_with_spec(scratch, "single")
        cdictk = [sys.executable, "-m", "cdictk"]
        with contextlib.ExitStack() as mounts:
            rootfs = mounts.enter_context(overlay(DEBIAN_ROOTFS, scratch / "overlay"))
            with_hooks = injected(cdictk, spec_dir, scratch / "config.json", rootfs)
            hooks = with_hooks.get("hooks", {}).get("createContainer", [])
            if not hooks:
                print("bench/hooks.py: the generated spec has no createContainer hook", file=sys.stderr)
                return 1
            without_hooks = {key: value for key, value in with_hooks.items() if key != "hooks"}
            bundles = {
                "hooks": write_bundle(scratch / "with-hooks", with_hooks),
                "no hooks": write_bundle(scratch / "without-hooks", without_hooks),
            }
            if nvidia is not None:
                # NVIDIA's update-ldcache adds a drop-in of a new name on every run: a rootfs of its own.
                nvidia_dir = scratch / "cdi-nvidia"
                nvidia_dir.mkdir()
                subprocess.run(
                    [
                        *cdictk,
                        "cdi",
                        "generate",
                        *node.cli_args(),
                        "--hook-path",
                        nvidia,
                        "--output",
                        str(nvidia_dir / "nvidia.yaml"),
                    ],
                    check=True,
                    stderr=subprocess.DEVNULL,
                )
                other = mounts.enter_context(overlay(DEBIAN_ROOTFS, scratch / "overlay-nv"))
                config = injected(cdictk, nvidia_dir, scratch / "config-nv.json", other)
                bundles[NVIDIA] = write_bundle(scratch / "nvidia-hooks", config)
            hook = hooks[0]
            python, entry = hook["args"][0], hook["args"][3]
            state = json.dumps(
                {"ociVersion": "1.0.2", "id": "bench", "bundle": str(bundles["hooks"])}
            ).encode()
            noop = "noop" if not run_quiet([python, "-I", "-S", entry, "noop"]) else "--help"
            commands: dict[str, Callable[[], float]] = {}
            for name in names:
                for variant, bundle in bundles.items():
                    commands[f"{name} run true, {variant}"] = container_run(
                        name, scratch / f"{name}-state", bundle
                    )
            commands[f"the hook{'s' if len(hooks) > 1 else ''} alone, state on stdin"] = lambda: sum(
                timed(h["args"], state) for h in hooks
            )
            commands["python -I -S -c pass"] = lambda: timed([python, "-I", "-S", "-c", "pass"])
            commands[f"python -I -S startpath/hooks/__main__.py {noop}"] = lambda: timed(
                [python, "-I", "-S", entry, noop]
            )

            for measure in commands.values():  # warm the page cache and the hooks' first changes
                measure()
                measure()
            times: dict[str, list[float]] = {label: [] for label in commands}
            for _ in range(args.rounds):
                for label, measure in commands.items():
                    times[label].append(measure())

    count = f"{len(hooks)} createContainer hook{'s' if len(hooks) > 1 else ''}"
    print(f"{count} from the generated spec: {python} -I -S {entry} {hook['args'][4]} ...")
    print(f"rootfs: overlay of {DEBIAN_ROOTFS}; {args.rounds} rounds, round-robin")
    print(f"  {'':<42} {'median ms':>9} {'best ms':>8}")
    for label, samples in times.items():
        print(row(label, samples))
    print()
    for name in names:
        added = statistics.median(times[f"{name} run true, hooks"]) - statistics.median(
            times[f"{name} run true, no hooks"]
        )
        print(f"{name}: hooks add {verdict(added, START_AIM_MS)}")
        if nvidia is not None:
            theirs = statistics.median(times[f"{name} run true, {NVIDIA}"]) - statistics.median(
                times[f"{name} run true, no hooks"]
            )
            ratio = added / theirs if theirs > 0 else float("inf")
            met = "met" if ratio <= RATIO_AIM else "missed"
            print(f"{name}: NVIDIA's hooks add {theirs:+.1f} ms; cdictk/NVIDIA {ratio:.2f} ", end="")
            print(f"(aim <= {RATIO_AIM}: {met})")
    imports = statistics.median(
        times[f"python -I -S startpath/hooks/__main__.py {noop}"]
    ) - statistics.median(times["python -I -S -c pass"])
    print(f"hook entry point over a bare interpreter: {verdict(imports, IMPORT_AIM_MS)}")
    for note in notes:
        print(f"left out: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
