"""A container start through the legacy prestart hook, against the same start through the runtime shim.

Builds the fake "single" node and its spec (with the batched createContainer hook, as generated: links
and the sandboxed ldconfig), a busybox rootfs and a settings file naming the spec dir and runc. Then,
round-robin so that a slow spell of this machine hits every row alike, N times each, it times a whole
``run`` of a container that asks for ``NVIDIA_VISIBLE_DEVICES=0`` and runs ``true`` (create, start,
exit; the delete after it is untimed), each on a fresh copy of the rootfs:

- ``runc run`` of the bundle with the spec injected beforehand (``cdictk cdi inject``): runc and the
  spec's hook, the floor both paths share;
- the shim: ``cdictk-runtime run`` of the bundle as the engine wrote it; the shim injects, then execs
  ``runc run``;
- the prestart hook: ``runc run`` of the same bundle with the ``cdictk-prestart`` launcher as its
  prestart hook, as ``docker run --gpus`` sets it up; the hook does the shim's work in the created
  container (nodes, read-only mounts, cgroup rules) and runs the spec's hook itself;
- the same with ``NVIDIA_REQUIRE_CUDA`` in the image's environment, as every CUDA image has: the
  hook reads the driver's CUDA version from the facts kept in the parse cache (NVML, the fake node's,
  asked in the NVML runner's child only when the cache misses, on the first start).

Aim: the prestart path at most 1.2 times the shim path. Both run through what
``cdictk runtime install-launchers`` writes for this Python, with a warm parse cache;
time it in a virtual environment with ``pip install .``. Needs root. Prints median and best in ms.
Usage: python -m bench.prestart [--rounds N]   (repository root, in the venv)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.fakespec import BenchError, checked, node_with_spec
from bench.shim import build_rootfs, row
from cdictk.runtime.launchers import install_launchers
from tests.e2e.conftest import oci_config

AIM_RATIO = 1.2
RUNC = "runc"
INJECTED = "runc run, spec injected beforehand"
SHIM = "shim run (cdictk-runtime injects, execs runc)"
PRESTART = "runc run with the prestart hook"
REQUIRING = "prestart hook, image has NVIDIA_REQUIRE_CUDA"
# A CUDA 12 image's value, shortened: NVML is asked in a child process whatever the length.
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=535"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench.prestart: needs root (mknod'd nodes, runc)", file=sys.stderr)
        return 1
    scratch = Path(tempfile.mkdtemp(prefix="cdictk-bench-prestart-"))
    try:
        return measure(args.rounds, scratch)
    except BenchError as exc:
        print(f"bench.prestart: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(rounds: int, scratch: Path) -> int:
    runc = shutil.which(RUNC)
    if runc is None:
        raise BenchError("runc is not installed")
    # From /: the installed cdictk writes the spec, so its hook entry point is the prestart hook's own.
    _, spec_dir = node_with_spec(scratch, "single", cwd="/")
    launchers = Path(install_launchers(str(scratch / "launchers"))[0]).parent
    settings = scratch / "config.toml"
    settings.write_text(  # the shim's rounds ask through NVIDIA_VISIBLE_DEVICES: accept it there
        f"[runtime]\nruntimes = [{json.dumps(runc)}]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n"
        "[requests]\naccept-env-unprivileged = true\n"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CDICTK_CONFIG": str(settings),
        "CDICTK_CACHE_DIR": str(scratch / "cache"),
    }
    base = scratch / "rootfs-base"
    build_rootfs(base)
    state = scratch / "runc-state"

    def config_for(rootfs: Path, hook: bool, requiring: bool) -> dict[str, Any]:
        config = oci_config(rootfs, ["true"])
        config["root"]["readonly"] = False
        config["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
        if requiring:
            config["process"]["env"].append(REQUIRE_CUDA)
        if hook:
            hook_env = [f"{key}={value}" for key, value in env.items()]
            launcher = str(launchers / "cdictk-prestart")
            config["hooks"] = {
                "prestart": [{"path": launcher, "args": [launcher, "prestart"], "env": hook_env}]
            }
        return config

    def start(name: str, round_dir: Path) -> float:
        rootfs = round_dir / "rootfs"
        shutil.copytree(base, rootfs, symlinks=True)
        bundle = round_dir / "bundle"
        bundle.mkdir()
        (bundle / "config.json").write_text(
            json.dumps(config_for(rootfs, name in (PRESTART, REQUIRING), name == REQUIRING))
        )
        program = [str(launchers / "cdictk-runtime")] if name == SHIM else [runc]
        if name == INJECTED:
            inject = [sys.executable, "-m", "cdictk", "cdi", "inject", "--spec-dir", str(spec_dir)]
            inject += ["-d", "nvidia.com/gpu=0", str(bundle / "config.json")]
            checked(subprocess.run(inject, capture_output=True, text=True, env=env, check=False))
        container = f"cdictk-bench-{uuid.uuid4().hex[:12]}"
        command = [*program, "--root", str(state), "run", "--bundle", str(bundle), container]
        log = round_dir / "log"
        try:
            with open(log, "wb") as out:
                began = time.perf_counter()
                result = subprocess.run(
                    command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, check=False
                )
                elapsed = (time.perf_counter() - began) * 1000
        finally:
            subprocess.run(
                [runc, "--root", str(state), "delete", "-f", container], capture_output=True, check=False
            )
        if result.returncode != 0:
            raise BenchError(f"{name}: exited {result.returncode}: {log.read_text(errors='replace').strip()}")
        return elapsed

    names = (INJECTED, SHIM, PRESTART, REQUIRING)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds + 1):  # round 0 warms the parse cache and the page cache
        for name in names:
            round_dir = scratch / f"round-{round_number}-{names.index(name)}"
            round_dir.mkdir()
            took = start(name, round_dir)
            if round_number:
                samples[name].append(took)
            shutil.rmtree(round_dir, ignore_errors=True)
    print(f"container start (run of `true`, NVIDIA_VISIBLE_DEVICES=0), {rounds} rounds, ms: median (best)")
    for name in names:
        print(row(name, samples[name]))
    shim, prestart = statistics.median(samples[SHIM]), statistics.median(samples[PRESTART])
    floor = statistics.median(samples[INJECTED])
    ratio = prestart / shim
    verdict = "within" if ratio <= AIM_RATIO else "OVER"
    print(f"prestart / shim: {ratio:.2f}x (aim <= {AIM_RATIO}x: {verdict})")
    print(f"with NVIDIA_REQUIRE_CUDA: {statistics.median(samples[REQUIRING]) / shim:.2f}x the shim")
    print(
        f"added over runc with the spec injected: shim {shim - floor:+.1f} ms, "
        f"prestart {prestart - floor:+.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
