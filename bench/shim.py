"""What ``cdictk-runtime`` adds to a container create, against calling runc (or crun) directly.

Builds the fake "single" node and generates its spec with ``--disable-hook all`` (no hook runs, so the
figures are the shim's own), a busybox rootfs (as tests/e2e/conftest.py builds it) and a config.toml
(``CDICTK_CONFIG``) naming runc and the spec dir. Then, round-robin so that a slow spell of this machine
hits every row alike, N times each, timing only the command named (each container is then deleted with
``runc delete -f``, untimed):
- ``runc create`` of a bundle with ``NVIDIA_VISIBLE_DEVICES=0`` whose config.json already has the device
  injected (the config the shim writes), against ``cdictk-runtime create`` of the same bundle before
  injection (a fresh copy of the original config.json each round): the difference is the shim's create
  overhead (aim: 30 ms). The shim's parse cache (``CDICTK_CACHE_DIR``, in the scratch dir) is warm
  after the first create, as on a node; a row with the cache off shows what a start that parses the
  settings and the spec costs;
- ``NVIDIA_VISIBLE_DEVICES=void``, runc and the shim: nothing to inject, so what is left is reading the
  settings, config.json and the requests, and the interpreter; and the same create through the front
  with the system's settings (no ``CDICTK_CONFIG``): its grep finds the variable, then Python;
- a create that asks for nothing at all (no ``NVIDIA_VISIBLE_DEVICES``, no annotation), runc and the
  shim with the system's settings, whose shell front greps config.json and execs runc itself (checked
  once under ``sh -x`` before timing; left out when the system's settings name another runtime);
- ``state`` of a created container, runc and through the shim: the pass-through, which the shim's
  shell front (:mod:`cdictk.runtime.shimfront`) execs without Python, and the same through Python (with
  ``CDICTK_CONFIG`` set, the front hands every command to the Python launcher);
- the shim's create of =0 and of =void in front of ``true`` instead of runc, and ``<python> -c pass``:
  the shim's own time, split into the interpreter start, the request path and the injection; and the
  create of =0 in front of ``true`` on a node without a spec on disk, whose spec the shim makes in
  memory from the fake node's roots and keeps in its cache under the node's fingerprint: kept, made
  anew after the node changed (its ld cache touched before each create, untimed: the settings stay
  cached), and made anew with the cache off (the first create after a reboot, which parses the
  settings too): cold paths, against the warm one.
Then the imports of one create under ``-X importtime``.

The shim runs through the launcher ``cdictk runtime install-launchers`` writes (``#!python -IS``, what
``cdictk runtime configure`` registers once it is installed), made for the Python of the installed
console script; that script (``cdictk-runtime`` on PATH, pip's wrapper: site, ``.pth`` files and
:mod:`re` first) gets a create row of its own. A wrapper found on PATH instead of the script (pyenv's
shim, a bash script) is resolved to the script beside this Python, and gets a row of its own too.
Without either, ``python -m cdictk.entrypoints.shim`` and this Python. Time it in the environment a node
has: a virtual environment with ``pip install .`` (an editable install adds a ``.pth`` finder).
With ``--nvidia-runtime PATH`` (NVIDIA's ``nvidia-container-runtime``, built ad hoc from its source),
the same creates (=0, =void, no request) and the same ``state`` through it, in its CDI mode over the same
spec dir and runtime (``NVIDIA_CTK_CONFIG_FILE_PATH``), in the same loop, and each against the shim;
with ``nvidia-ctk`` beside it, also its default mode, jit-cdi (the node's spec made at every create from
the fake node's driver root), against the shim on a node without a spec on disk, both through runc
with their hooks run.
Needs root (mknod'd nodes, runc). Prints median and best in ms.
Usage: python -m bench.shim [--rounds N] [--runtime runc|crun] [--nvidia-runtime PATH]
(repository root, in the venv)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fakespec import BenchError, node_with_spec
from tests.e2e.conftest import build_busybox_rootfs, busybox_problem, oci_config

AIM_MS = 30.0
IMPORT_FLOOR_MS = 1.0  # imports shown in the breakdown take at least this long
SCRIPT = "cdictk-runtime"
CREATE_DIRECT = "runc create, =0 injected beforehand"
CREATE_SHIM = "shim create, =0 (the shim injects)"
CREATE_SCRIPT = "shim create, =0, through pip's console script"
CREATE_COLD = "shim create, =0, cache off (parses the spec each time)"
VOID_DIRECT = "runc create, =void"
VOID_SHIM = "shim create, =void (nothing to inject)"
VOID_FRONT = "shim create, =void, the front's grep, then Python"
PLAIN_DIRECT = "runc create, no request"
PLAIN_SHIM = "shim create, no request (its front execs runc)"
STATE_DIRECT = "runc state"
STATE_SHIM = "shim state (its shell front execs runc)"
STATE_PYTHON = "shim state through Python (CDICTK_CONFIG)"
NV_CREATE = "nvidia-container-runtime create, =0 (cdi mode)"
NV_VOID = "nvidia-container-runtime create, =void"
NV_PLAIN = "nvidia-container-runtime create, no request"
NV_STATE = "nvidia-container-runtime state"
MEMORY_RUNC = "shim create, =0, node's spec kept, its hook run"
NV_JIT = "nvidia-container-runtime create, =0 (jit-cdi)"
ALONE_GPU = "shim create, =0, in front of true (no runc)"
ALONE_VOID = "shim create, =void, in front of true"
ALONE_MEMORY = "shim create, =0, node's spec kept, before true"
ALONE_MEMORY_CHANGED = "shim create, =0, node changed, spec made anew, before true"
ALONE_MEMORY_COLD = "shim create, =0, cache empty, spec made anew, before true"
FLOOR = "python -c pass (the shim's interpreter)"
BARE = "python -I -S -c pass (no site, no .pth files)"
VIA_WRAPPER = "shim create, =0, through PATH's wrapper"


def build_rootfs(root: Path) -> None:
    """A busybox rootfs, as tests/e2e/conftest.py's ``rootfs`` fixture builds it."""
    problem = busybox_problem()
    if problem is not None:
        raise BenchError(problem)
    build_busybox_rootfs(root)


def python_script(path: str) -> str | None:
    """The interpreter of ``path`` when its #! line names a Python, else None."""
    with open(path, "rb") as handle:
        first = handle.readline().decode(errors="replace").strip()
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    return words[0] if words and os.path.basename(words[0]).startswith("python") else None


def shim_command() -> tuple[list[str], str, str | None, str]:
    """The shim's command line, its Python, a wrapper found on PATH instead of it, and what was chosen."""
    found = shutil.which(SCRIPT)
    if found is not None and (python := python_script(found)) is not None:
        return [found], python, None, f"the console script on PATH, {found} (runs {python})"
    beside = os.path.join(sysconfig.get_path("scripts"), SCRIPT)
    if found is not None and os.access(beside, os.X_OK) and (python := python_script(beside)) is not None:
        note = f"{beside} (runs {python}): PATH's {found} is a wrapper, not the script"
        return [beside], python, found, note
    return (
        [sys.executable, "-m", "cdictk.entrypoints.shim"],
        sys.executable,
        None,
        f"{sys.executable} -m cdictk.entrypoints.shim ({SCRIPT} is not installed)",
    )


class Bench:
    """The runtime's state dir and every container made in it: ``cleanup`` deletes whatever is left."""

    def __init__(self, runtime: str, scratch: Path, env: dict[str, str]) -> None:
        self.runtime = runtime
        self.state = scratch / f"{os.path.basename(runtime)}-state"
        self.env = env
        self.log = scratch / "command.log"
        self.live: set[str] = set()

    def run(self, command: list[str], env: dict[str, str] | None = None) -> float:
        """Runs ``command``; returns its wall time in ms. Output goes to a file, never a pipe: the
        container's init keeps runc's stdio open until it is deleted, and a pipe would never close."""
        with open(self.log, "wb") as log:
            start = time.perf_counter()
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env or self.env, check=False
            )
            elapsed = (time.perf_counter() - start) * 1000
        if result.returncode != 0:
            output = self.log.read_text(errors="replace").strip()
            raise BenchError(f"{' '.join(command[:8])} ... exited {result.returncode}: {output}")
        return elapsed

    def create(self, program: list[str], bundle: Path, env: dict[str, str] | None = None) -> float:
        """Times ``program create`` of ``bundle``; the container is deleted after, untimed."""
        container = f"cdictk-bench-{uuid.uuid4().hex[:12]}"
        self.live.add(container)
        try:
            return self.run(
                [*program, "--root", str(self.state), "create", "--bundle", str(bundle), container], env
            )
        finally:
            self.delete(container)

    def create_kept(self, bundle: Path) -> str:
        container = f"cdictk-bench-{uuid.uuid4().hex[:12]}"
        self.live.add(container)
        self.run([self.runtime, "--root", str(self.state), "create", "--bundle", str(bundle), container])
        return container

    def delete(self, container: str) -> None:
        subprocess.run(
            [self.runtime, "--root", str(self.state), "delete", "-f", container],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        self.live.discard(container)

    def cleanup(self) -> list[str]:
        """Deletes every container still here; returns those that would not go."""
        for container in list(self.live):
            self.delete(container)
        for container in self.listed():  # any the bench lost track of
            self.delete(container)
        return self.listed()

    def listed(self) -> list[str]:
        return subprocess.run(
            [self.runtime, "--root", str(self.state), "list", "-q"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()


def front_execs(bench: Bench, front: str, bundle: Path, env: dict[str, str]) -> str:
    """The program the shell front ``front`` execs for a create of ``bundle``: the last ``exec`` that
    ``sh -x`` traces. The container is deleted after."""
    container = f"cdictk-bench-{uuid.uuid4().hex[:12]}"
    bench.live.add(container)
    create = ["--root", str(bench.state), "create", "--bundle", str(bundle), container]
    try:
        bench.run(["/bin/sh", "-x", front, *create], env)
    finally:
        bench.delete(container)
    execs = [line.split()[2] for line in bench.log.read_text().splitlines() if line.startswith("+ exec ")]
    return execs[-1] if execs else ""


def write_bundle(path: Path, config: bytes) -> Path:
    path.mkdir()
    (path / "config.json").write_bytes(config)
    return path


def fresh(bundle: Path, config: bytes) -> Path:
    """The bundle with its original config.json back (the shim rewrote it)."""
    (bundle / "config.json").write_bytes(config)
    return bundle


@contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cdictk-bench-shim-") as name:
        yield Path(name)


@dataclass
class Import:
    module: str
    depth: int
    own_ms: float
    cumulative_ms: float
    children: list[Import] = field(default_factory=list)


def import_profile(command: list[str], env: dict[str, str]) -> list[Import]:
    """``-X importtime`` of ``command`` (a Python command line) as a tree, in import order. Python
    reports an import when it ends, so a module's own imports come before it, one level deeper."""
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise BenchError(f"-X importtime run exited {result.returncode}: {result.stderr.strip()[-400:]}")
    pending: list[Import] = []  # finished imports whose parent has not been reported yet
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line[len("import time:") :].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        node = Import(name.strip(), depth, int(own) / 1000, int(cumulative) / 1000)
        while pending and pending[-1].depth > depth:
            node.children.insert(0, pending.pop())
        pending.append(node)
    return pending


def print_imports(imports: list[Import], floor_ms: float, depth: int = 0, limit: int = 2) -> None:
    """Each import over ``floor_ms``, to ``limit`` levels, parents before their own imports."""
    for node in imports:
        if node.cumulative_ms >= floor_ms:
            print(f"    {'  ' * depth}{node.module:<{50 - 2 * depth}} {node.cumulative_ms:>6.1f} ms")
            if depth + 1 < limit:
                print_imports(node.children, floor_ms, depth + 1, limit)


def row(name: str, samples: list[float]) -> str:
    return f"  {name:<58} {statistics.median(samples):>9.1f} {min(samples):>8.1f}"


def verdict(added: float, aim: float) -> str:
    return f"{added:+.1f} ms (aim <= {aim:.0f} ms: {'met' if added <= aim else 'missed'}, {added / aim:.2f}x)"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--runtime", choices=("runc", "crun"), default="runc")
    parser.add_argument(
        "--nvidia-runtime", metavar="PATH", help="NVIDIA's nvidia-container-runtime, for its rows (CDI mode)"
    )
    args = parser.parse_args()
    nvidia = os.path.abspath(args.nvidia_runtime) if args.nvidia_runtime else None
    if nvidia is not None and not os.access(nvidia, os.X_OK):
        print(f"bench/shim.py: {nvidia} is not an executable", file=sys.stderr)
        return 1
    if os.geteuid() != 0:
        print("bench/shim.py needs root: mknod'd device nodes, runc", file=sys.stderr)
        return 1
    runtime = shutil.which(args.runtime)
    if runtime is None:
        print(f"bench/shim.py: {args.runtime} is not installed (tests/setup-host.sh)", file=sys.stderr)
        return 1
    try:
        with scratch_dir() as scratch:
            return measure(args.rounds, runtime, scratch, nvidia)
    except BenchError as exc:
        print(f"bench/shim.py: {exc}", file=sys.stderr)
        return 1


def write_settings(path: Path, runtime: str, spec_dir: Path) -> Path:
    """A cdictk config.toml (named by CDICTK_CONFIG), as an operator would write for the shim. The
    bench asks through NVIDIA_VISIBLE_DEVICES, which only a node that accepts env requests honours."""
    path.write_text(
        f"[runtime]\nruntimes = [{json.dumps(runtime)}]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n"
        "[requests]\naccept-env-unprivileged = true\n"
    )
    return path


def memory_settings(path: Path, runtime: str, empty: Path, roots: list[str]) -> Path:
    """Settings of a node without a spec on disk: the shim makes the node's spec in memory
    (``[node] generate-when-missing``, the default), from the fake node's roots."""
    flags = dict(zip(roots[::2], roots[1::2], strict=True))
    node = {"driver-root": flags["--driver-root"], "proc-root": flags["--proc-root"]}
    node |= {"sys-root": flags["--sys-root"], "dev-root": flags["--driver-root"]}
    lines = [f"{key} = {json.dumps(value)}" for key, value in node.items()]
    path.write_text(
        f"[runtime]\nruntimes = [{json.dumps(runtime)}]\nspec-dirs = [{json.dumps(str(empty))}]\n"
        "[node]\n" + "\n".join(lines) + "\n[requests]\naccept-env-unprivileged = true\n"
    )
    return path


def nvidia_jit_settings(path: Path, runtime: str, nvidia_ctk: str, driver_root: str) -> Path:
    """NVIDIA's config.toml for its default mode, jit-cdi: the node's spec made at every create, from
    the fake node's driver root, its hooks run by ``nvidia-ctk hook``."""
    path.write_text(
        f"[nvidia-container-cli]\nroot = {json.dumps(driver_root)}\n"
        f'[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = [{json.dumps(runtime)}]\n'
        f"[nvidia-ctk]\npath = {json.dumps(nvidia_ctk)}\n"
    )
    return path


def nvidia_settings(path: Path, runtime: str, spec_dir: Path) -> Path:
    """NVIDIA's config.toml for the same work: CDI mode over the same spec dir, the same runtime
    (NVIDIA_VISIBLE_DEVICES=0 becomes nvidia.com/gpu=0, as the shim makes it)."""
    path.write_text(
        f'[nvidia-container-runtime]\nmode = "cdi"\nruntimes = [{json.dumps(runtime)}]\n'
        f"[nvidia-container-runtime.modes.cdi]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n"
    )
    return path


def measure(rounds: int, runtime: str, scratch: Path, nvidia: str | None = None) -> int:
    script, python, wrapper, chosen = shim_command()
    installed = subprocess.run(
        [python, "-m", "cdictk", "runtime", "install-launchers", "--dir", str(scratch / "launchers")],
        capture_output=True,
        text=True,
        check=False,
    )
    if installed.returncode != 0:
        raise BenchError(f"cdictk runtime install-launchers: {installed.stderr.strip()}")
    shim = [str(scratch / "launchers" / SCRIPT)]
    node, spec_dir = node_with_spec(scratch, "single", "--disable-hook", "all")
    spec = spec_dir / "nvidia.yaml"
    rootfs = scratch / "rootfs"
    build_rootfs(rootfs)

    def config_for(visible: str) -> dict[str, Any]:
        config = oci_config(rootfs, ["true"])
        config["process"]["env"].append(f"NVIDIA_VISIBLE_DEVICES={visible}")
        return config

    gpu_config = json.dumps(config_for("0")).encode()
    void_config = json.dumps(config_for("void")).encode()
    plain_config = json.dumps(oci_config(rootfs, ["true"])).encode()
    path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    cache = str(scratch / "cache")
    env = {
        "PATH": path,
        "CDICTK_CONFIG": str(write_settings(scratch / "runc.toml", runtime, spec_dir)),
        "CDICTK_CACHE_DIR": cache,
    }
    cold_env = {**env, "CDICTK_CACHE_DIR": ""}
    true = shutil.which("true") or "/bin/true"
    alone_env = {
        "PATH": path,
        "CDICTK_CONFIG": str(write_settings(scratch / "true.toml", true, spec_dir)),
        "CDICTK_CACHE_DIR": cache,
    }
    (scratch / "no-specs").mkdir()
    memory_env = {
        "PATH": path,
        "CDICTK_CONFIG": str(
            memory_settings(scratch / "memory.toml", true, scratch / "no-specs", node.cli_args())
        ),
        "CDICTK_CACHE_DIR": cache,
    }
    system_env = {"PATH": path, "CDICTK_CACHE_DIR": cache}  # the front's shortcuts need no CDICTK_CONFIG
    bench = Bench(runtime, scratch, env)
    front_note = ""
    try:
        bundles = {
            name: write_bundle(scratch / name, void_config if "void" in name else gpu_config)
            for name in (
                "shim-gpu",
                "cold-gpu",
                "direct-gpu",
                "void",
                "alone-gpu",
                "alone-void",
                "alone-memory",
            )
        }
        # The direct bundle gets exactly what the shim writes: the shim itself, in front of true.
        bench.run([*shim, "create", "--bundle", str(bundles["direct-gpu"]), "x"], alone_env)
        injected = json.loads((bundles["direct-gpu"] / "config.json").read_text())
        nodes = [d["path"] for d in injected.get("linux", {}).get("devices", [])]
        mounts = len(injected.get("mounts", [])) - len(config_for("0")["mounts"])
        if "/dev/nvidia0" not in nodes or "hooks" in injected:
            raise BenchError(f"the injected config has devices {nodes} and hooks: {'hooks' in injected}")
        kept = bench.create_kept(bundles["void"])
        plain = write_bundle(scratch / "plain", plain_config)
        execs = front_execs(bench, shim[0], plain, system_env)
        if execs == shim[0] + ".py":
            raise BenchError(f"the front sent a create without a request to Python ({shim[0]})")
        through_front: dict[str, Callable[[], float]] = {
            PLAIN_DIRECT: lambda: bench.create([runtime], plain),
            PLAIN_SHIM: lambda: bench.create(shim, plain, system_env),
            VOID_FRONT: lambda: bench.create(shim, bundles["void"], system_env),
        }
        if execs != runtime:  # the front runs what /etc/cdictk/config.toml names
            front_note = f"left out: the installed front execs {execs} (the system's settings), not {runtime}"
            through_front = {}
        state = ["--root", str(bench.state), "state", kept]

        def alone(
            bundle: str, config: bytes, settings: dict[str, str] = alone_env, *, change: bool = False
        ) -> Callable[[], float]:
            def command() -> float:
                target = str(fresh(bundles[bundle], config))
                if change:  # what a driver upgrade does to the node's fingerprint: its ld cache rewritten
                    os.utime(os.path.join(node.root, "etc", "ld.so.cache"))
                return bench.run([*shim, "create", "--bundle", target, "x"], settings)

            return command

        commands: dict[str, Callable[[], float]] = {
            CREATE_DIRECT: lambda: bench.create([runtime], bundles["direct-gpu"]),
            CREATE_SHIM: lambda: bench.create(shim, fresh(bundles["shim-gpu"], gpu_config)),
            CREATE_SCRIPT: lambda: bench.create(script, fresh(bundles["shim-gpu"], gpu_config)),
            CREATE_COLD: lambda: bench.create(shim, fresh(bundles["cold-gpu"], gpu_config), cold_env),
            VOID_DIRECT: lambda: bench.create([runtime], bundles["void"]),
            VOID_SHIM: lambda: bench.create(shim, bundles["void"]),
            **through_front,
            STATE_DIRECT: lambda: bench.run([runtime, *state]),
            # The front takes its shortcut only with the system's settings: no CDICTK_CONFIG.
            STATE_SHIM: lambda: bench.run([*shim, *state], {"PATH": path}),
            STATE_PYTHON: lambda: bench.run([*shim, *state]),
            ALONE_GPU: alone("alone-gpu", gpu_config),
            ALONE_VOID: alone("alone-void", void_config),
            ALONE_MEMORY: alone("alone-memory", gpu_config, memory_env),
            ALONE_MEMORY_CHANGED: alone("alone-memory", gpu_config, memory_env, change=True),
            ALONE_MEMORY_COLD: alone("alone-memory", gpu_config, {**memory_env, "CDICTK_CACHE_DIR": ""}),
            FLOOR: lambda: bench.run([python, "-c", "pass"]),
            BARE: lambda: bench.run([python, "-I", "-S", "-c", "pass"]),
        }
        if wrapper is not None:
            commands[VIA_WRAPPER] = lambda: bench.create([wrapper], fresh(bundles["shim-gpu"], gpu_config))
        if nvidia is not None:
            nv_env = {
                "PATH": path,
                "NVIDIA_CTK_CONFIG_FILE_PATH": str(
                    nvidia_settings(scratch / "nvidia.toml", runtime, spec_dir)
                ),
            }
            nv_gpu = write_bundle(scratch / "nvidia-gpu", gpu_config)
            nv_void = write_bundle(scratch / "nvidia-void", void_config)
            commands[NV_CREATE] = lambda: bench.create([nvidia], fresh(nv_gpu, gpu_config), nv_env)
            commands[NV_VOID] = lambda: bench.create([nvidia], nv_void, nv_env)
            if PLAIN_SHIM in commands:  # its own copy: NVIDIA's runtime rewrites config.json even then
                nv_plain = write_bundle(scratch / "nvidia-plain", plain_config)
                commands[NV_PLAIN] = lambda: bench.create([nvidia], fresh(nv_plain, plain_config), nv_env)
            commands[NV_STATE] = lambda: bench.run([nvidia, *state], nv_env)
            nvidia_ctk = os.path.join(os.path.dirname(nvidia), "nvidia-ctk")
            if os.access(nvidia_ctk, os.X_OK):  # jit-cdi needs NVIDIA's generator, built beside it
                jit_env = {
                    "PATH": path,
                    "NVIDIA_CTK_CONFIG_FILE_PATH": str(
                        nvidia_jit_settings(scratch / "nvidia-jit.toml", runtime, nvidia_ctk, node.root)
                    ),
                }
                memory_runc = {
                    **memory_env,
                    "CDICTK_CONFIG": str(
                        memory_settings(
                            scratch / "memory-runc.toml", runtime, scratch / "no-specs", node.cli_args()
                        )
                    ),
                }
                nv_jit = write_bundle(scratch / "nvidia-jit", gpu_config)
                memory_bundle = write_bundle(scratch / "memory-runc", gpu_config)
                commands[MEMORY_RUNC] = lambda: bench.create(
                    shim, fresh(memory_bundle, gpu_config), memory_runc
                )
                commands[NV_JIT] = lambda: bench.create([nvidia], fresh(nv_jit, gpu_config), jit_env)
        for command in commands.values():  # warm the page cache
            command()
        # The shim wrote what runc is timed on, and left the void config alone.
        if json.loads((bundles["alone-gpu"] / "config.json").read_text()) != injected:
            raise BenchError("the shim's config.json differs from the one runc is timed on")
        if (bundles["void"] / "config.json").read_bytes() != void_config:
            raise BenchError("the shim rewrote the void bundle's config.json")
        if (plain / "config.json").read_bytes() != plain_config:
            raise BenchError("the bundle without a request has a different config.json now")
        # NVIDIA's runtime did the same work: the device is in what runc got, in either mode.
        for done in ("nvidia-gpu", "nvidia-jit", "memory-runc"):
            if (scratch / done).exists():
                linux = json.loads((scratch / done / "config.json").read_text())["linux"]
                if "/dev/nvidia0" not in [device["path"] for device in linux.get("devices", [])]:
                    raise BenchError(f"the {done} bundle's create did not inject nvidia.com/gpu=0")

        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(rounds):
            for label, command in commands.items():
                times[label].append(command())

        profile = [python, "-I", "-S", "-X", "importtime", shim[0] + ".py"]  # the Python launcher
        target = str(fresh(bundles["alone-gpu"], gpu_config))
        imports = import_profile([*profile, "create", "--bundle", target, "x"], alone_env)
        bench.delete(kept)
    finally:
        stuck = bench.cleanup()
        if stuck:
            print(f"bench/shim.py: containers left in {bench.state}: {' '.join(stuck)}", file=sys.stderr)

    name = os.path.basename(runtime)
    median = {label: statistics.median(samples) for label, samples in times.items()}
    print(f"shim: the launcher {shim[0]} (#!{python} -IS); console script: {chosen}")
    print(f"runtime: {runtime}; settings: a config.toml (CDICTK_CONFIG) naming it and the spec dir")
    print(f"spec: fake 'single' node, cdictk cdi generate --disable-hook all ({spec.stat().st_size} bytes)")
    print(f"NVIDIA_VISIBLE_DEVICES=0 injects {len(nodes)} device nodes and {mounts} mounts, no hooks")
    print(f"rootfs: busybox; {rounds} rounds, round-robin; only the command itself is timed")
    print(f"  {'':<58} {'median ms':>9} {'best ms':>8}")
    for label, samples in times.items():
        print(row(label.replace("runc", name, 1), samples))
    print()
    create = median[CREATE_SHIM] - median[CREATE_DIRECT]
    print(f"shim create over {name} create, =0:    {verdict(create, AIM_MS)}")
    through_script = median[CREATE_SCRIPT] - median[CREATE_DIRECT]
    print(f"  the same through pip's console script: {verdict(through_script, AIM_MS)}")
    print(
        f"shim create over {name} create, =void: {verdict(median[VOID_SHIM] - median[VOID_DIRECT], AIM_MS)}"
    )
    if PLAIN_SHIM in median:
        plain_added = median[PLAIN_SHIM] - median[PLAIN_DIRECT]
        print(f"shim create over {name} create, no request: {plain_added:+.1f} ms (the front alone)")
        front_check = median[VOID_FRONT] - median[VOID_SHIM]
        print(f"  =void through the front's grep, less =void through Python at once: {front_check:+.1f} ms")
    else:
        print(f"shim create, no request: {front_note}")
    print(f"pass-through (state) over {name} state: {median[STATE_SHIM] - median[STATE_DIRECT]:+.1f} ms")
    print(f"  the same through Python: {median[STATE_PYTHON] - median[STATE_DIRECT]:+.1f} ms")
    if NV_CREATE in median:
        print(f"against NVIDIA's runtime, each over {name} alone (aim: cdictk/NVIDIA <= 1):")
        for what, ours, theirs, direct in (
            ("create, none", PLAIN_SHIM, NV_PLAIN, PLAIN_DIRECT),
            ("create, =0", CREATE_SHIM, NV_CREATE, CREATE_DIRECT),
            ("create, =void", VOID_SHIM, NV_VOID, VOID_DIRECT),
            ("=void, grep", VOID_FRONT, NV_VOID, VOID_DIRECT),
            ("state", STATE_SHIM, NV_STATE, STATE_DIRECT),
        ):
            if ours not in median:
                continue
            mine, nvidias = median[ours] - median[direct], median[theirs] - median[direct]
            ratio = f"{mine / nvidias:.2f}" if nvidias > 0 else "n/a"
            print(f"  {what:<14} cdictk {mine:+6.1f} ms, NVIDIA {nvidias:+6.1f} ms, ratio {ratio}")
        if NV_JIT in median:
            mine, nvidias = median[MEMORY_RUNC], median[NV_JIT]
            print(
                f"  no spec on disk, hooks run: cdictk (its spec kept) {mine:.1f} ms, NVIDIA (jit-cdi) "
                f"{nvidias:.1f} ms, ratio {mine / nvidias:.2f}"
            )
    if wrapper is not None:
        print(f"{wrapper} (a wrapper) adds {median[VIA_WRAPPER] - median[CREATE_SHIM]:+.1f} ms more per call")
    print()
    memory, changed, anew = (
        median[row] / median[ALONE_GPU] for row in (ALONE_MEMORY, ALONE_MEMORY_CHANGED, ALONE_MEMORY_COLD)
    )
    print(
        f"cold paths against the warm shim create of =0 (aim: at most 2x): cache off "
        f"{median[CREATE_COLD] / median[CREATE_SHIM]:.2f}x with {name}; without a spec on disk, in front "
        f"of true, the node's spec kept {memory:.2f}x, made anew after the node changed {changed:.2f}x, "
        f"made anew with the cache empty (the first create after a reboot) {anew:.2f}x"
    )
    bare, floor, void, gpu = median[BARE], median[FLOOR], median[ALONE_VOID], median[ALONE_GPU]
    script_extra = median[CREATE_SCRIPT] - median[CREATE_SHIM]
    print(f"where the shim's {gpu:.1f} ms (create of =0 in front of true, no {name}) goes, by medians:")
    print(f"  the interpreter's own start (python -I -S -c pass):                {bare:6.1f} ms")
    print(f"  settings, config.json, the requests, exec (=void less -I -S):      {void - bare:6.1f} ms")
    print(f"  the spec dir, resolve, inject, write config.json (=0 less =void):  {gpu - void:6.1f} ms")
    print(f"a console script adds to that: site and its .pth files ({floor - bare:.1f} ms, -c pass less")
    print(f"  -I -S -c pass), then re and pip's wrapper: {script_extra:+.1f} ms per create in all")
    site = next((node for node in imports if node.module == "site"), None)
    after = imports[imports.index(site) + 1 :] if site is not None else imports
    own = sum(node.cumulative_ms for node in after)
    print(f"imports of one create of =0 under -X importtime (which inflates them), {IMPORT_FLOOR_MS} ms up:")
    if site is not None:
        print(f"  site, at interpreter start: {site.cumulative_ms:.1f} ms")
        print_imports(site.children, IMPORT_FLOOR_MS)
    print(f"  the shim's own imports: {own:.1f} ms")
    print_imports(after, IMPORT_FLOOR_MS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
