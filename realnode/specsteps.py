"""The node's two specs, as the check's rows: cdictk's (generate, validate, info) and NVIDIA's beside it
(nvidia-ctk from the bundle), then compared (:mod:`realnode.speccompare`).

Both are written as YAML (what an operator gets) into the check's private spec dirs, never /etc/cdi or
/var/run/cdi; the venv's Python (which has PyYAML) turns them into JSON for the comparison and for the
steps after it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from collections.abc import Mapping
from typing import Any

from realnode import speccompare
from realnode.checkstate import State
from realnode.nodefacts import Roots
from realnode.pyenv import Venv
from realnode.recorder import Recorder, Row, StepFailed, StepSkipped

# The spec dirs, by whose spec each holds, and the file each spec is copied to in the report's dir
# ("runtime": cdictk's spec generated through the node runtime, realnode/bundledruntime.py).
SPEC_FILES = {
    "cdictk": "spec-cdictk.yaml",
    "nvidia": "spec-nvidia.yaml",
    "runtime": "spec-cdictk-runtime.yaml",
}
# What nvidia-ctk reads from the host whatever its roots (it has no --proc-root or --sys-root).
HOST_READS = ("/proc/driver", "/sys/bus/pci/devices", "/sys/module/firmware_class/parameters")
TO_JSON = "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), open(sys.argv[2], 'w'))"


def run_spec_steps(recorder: Recorder, roots: Roots, state: State) -> None:
    """The spec rows: cdictk's spec generated, validated and checked by ``cdictk info``, NVIDIA's
    generated beside it, both compared; the GPU the containers ask for chosen from them."""
    for name in SPEC_FILES:
        state.spec_dirs[name] = os.path.join(state.work, "cdi", name)
        os.makedirs(state.spec_dirs[name])
    ours = os.path.join(state.spec_dirs["cdictk"], "nvidia.yaml")
    with recorder.step("cdictk cdi generate --mode auto") as row:
        recorder.need(20)
        if state.venv is None:
            raise StepSkipped("needs cdictk installed")
        generate(recorder, row, state.venv.script("cdictk"), roots, ours)
        shutil.copyfile(ours, os.path.join(recorder.out, SPEC_FILES["cdictk"]))
        as_json = os.path.join(state.work, "cdictk.json")
        state.loaded["cdictk"] = load(recorder, state.venv.python, ours, as_json)
        devices = [d["name"] for d in state.loaded["cdictk"].get("devices") or []]
        row.data["devices"] = devices
    with recorder.step("cdictk cdi validate") as row:
        recorder.need(10)
        if state.venv is None or "cdictk" not in state.loaded:
            raise StepSkipped("needs cdictk's spec")
        validate(recorder, row, state.venv.script("cdictk"), ours)
    with recorder.step("cdictk info") as row:
        recorder.need(10)
        if state.venv is None:
            raise StepSkipped("needs cdictk installed")
        info(recorder, row, state.venv, roots, state.spec_dirs["cdictk"])
    theirs = os.path.join(state.spec_dirs["nvidia"], "nvidia.yaml")
    with recorder.step("nvidia-ctk cdi generate") as row:
        recorder.need(20)
        nvidia = state.carried.nvidia if state.carried else {}
        if "nvidia-ctk" not in nvidia or "nvidia-cdi-hook" not in nvidia:
            raise StepSkipped("NVIDIA's tools are not in the bundle (make real-node-bundle NVIDIA_TOOLS=DIR)")
        if state.venv is None:
            raise StepSkipped("needs cdictk installed (its PyYAML reads the spec)")
        generate_nvidia(recorder, row, nvidia, roots, theirs)
        shutil.copyfile(theirs, os.path.join(recorder.out, SPEC_FILES["nvidia"]))
        state.loaded["nvidia"] = load(
            recorder, state.venv.python, theirs, os.path.join(state.work, "nvidia.json")
        )
    with recorder.step("specs compared item by item") as row:
        recorder.need(10)
        if state.venv is None or len(state.loaded) < 2:
            raise StepSkipped("needs both specs")
        compared = speccompare.compare(
            state.loaded["nvidia"],
            state.loaded["cdictk"],
            roots.driver,
            speccompare.step_table(recorder, state.venv),
        )
        recorder.sections["comparison"] = compared
        row.detail = speccompare.summary(compared)
    state.device = speccompare.first_gpu(*state.loaded.values()) if state.loaded else "0"


def cdictk_roots(roots: Roots) -> list[str]:
    if not roots.fake:
        return []
    return [
        "--driver-root",
        roots.driver,
        "--dev-root",
        roots.dev,
        "--proc-root",
        roots.proc,
        "--sys-root",
        roots.sys,
    ]


def generate(recorder: Recorder, row: Row, cdictk: str, roots: Roots, output: str) -> None:
    """``cdictk cdi generate --mode auto`` by the program ``cdictk`` (the venv's, or the node runtime's)."""
    command = [
        cdictk,
        "cdi",
        "generate",
        "--mode",
        "auto",
        *cdictk_roots(roots),
        "--output",
        output,
    ]
    result = recorder.run(command, 90)
    row.data["command"] = " ".join(command)
    row.data["stderr"] = result.stderr.strip()[-2000:]
    if not result.ok or not os.path.exists(output):
        recorder.fail(row, result)
    row.detail = (result.stderr.strip().splitlines() or ["written"])[-1]


def validate(recorder: Recorder, row: Row, cdictk: str, spec: str) -> None:
    result = recorder.run([cdictk, "cdi", "validate", spec], 60)
    if not result.ok:
        recorder.fail(row, result)
    row.detail = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "valid"


def info(recorder: Recorder, row: Row, venv: Venv, roots: Roots, spec_dir: str) -> None:
    """``cdictk info`` on the node with the check's spec dir: its checks in the report; a failed check
    (exit 1) fails the row."""
    info_roots = cdictk_roots(roots)
    command = [venv.script("cdictk"), "info", "--json", *info_roots, "--spec-dir", spec_dir]
    result = recorder.run(command, 90)
    try:
        row.data["info"] = json.loads(result.stdout)
    except ValueError:
        recorder.fail(row, result, f"no JSON from cdictk info: {result.why()}")
    findings = row.data["info"].get("findings", []) if isinstance(row.data["info"], dict) else []
    bad = [f"{f.get('check')}: {f.get('detail')}" for f in findings if f.get("status") not in ("ok", "warn")]
    warned = [str(f.get("check")) for f in findings if f.get("status") == "warn"]
    row.detail = "; ".join(bad) if bad else f"{len(findings)} checks, none failed"
    row.detail += f" (warnings: {', '.join(warned)})" if warned else ""
    if not result.ok:
        recorder.fail(row, result, row.detail)


def host_view(roots: Roots) -> list[str]:
    """A command prefix that shows nvidia-ctk the fake node's procfs and sysfs files (the dry run):
    a private mount namespace with the node's copies bound over the host's. Nothing on a real node."""
    if not roots.fake:
        return []
    sources = {
        "/proc/driver": os.path.join(roots.proc, "driver"),
        "/sys/bus/pci/devices": os.path.join(roots.sys, "bus/pci/devices"),
        "/sys/module/firmware_class/parameters": os.path.join(roots.sys, "module/firmware_class/parameters"),
    }
    bound = [path for path in HOST_READS if os.path.isdir(sources[path]) and os.path.isdir(path)]
    script = "set -e; " + "".join(f'mount --bind "$1" {path}; shift; ' for path in bound) + 'exec "$@"'
    unshare = shutil.which("unshare")
    if unshare is None:
        raise StepFailed("the dry run needs unshare (util-linux) to show nvidia-ctk the fake node")
    return [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        *[sources[p] for p in bound],
    ]


# Where a cloud may keep the driver outside the ld cache (GKE-like); an operator points nvidia-ctk at it.
DRIVER_TREES = ("/usr/local/nvidia",)


def nvidia_roots(roots: Roots) -> list[list[str]]:
    """The roots nvidia-ctk is tried with, in turn: the node's, then a driver tree of its own when the
    node has one (nvidia-ctk finds the driver's libraries only through the ld cache and its search
    paths under the driver root)."""
    first = ["--driver-root", roots.driver, "--dev-root", roots.dev] if roots.fake else []
    trees = [roots.under(roots.driver, tree) for tree in DRIVER_TREES]
    found = [tree for tree in trees if glob.glob(os.path.join(tree, "lib*", "libcuda.so.*"))]
    return [first, *[["--driver-root", tree, "--dev-root", roots.dev] for tree in found]]


def generate_nvidia(
    recorder: Recorder, row: Row, tools: Mapping[str, str], roots: Roots, output: str
) -> None:
    """nvidia-ctk's spec, from the first roots whose spec mounts libcuda (the last one's else)."""
    hook = ["--nvidia-cdi-hook-path", tools["nvidia-cdi-hook"]]
    attempts = []
    # nvidia-ctk takes the first nvidia-smi (and the other programs) it finds on PATH: the node's PATH
    # decides where NVIDIA's spec mounts them from.
    row.data["PATH"] = os.environ.get("PATH", "")
    for dirs in nvidia_roots(roots):
        if os.path.exists(output):
            os.unlink(output)
        command = [
            *host_view(roots),
            tools["nvidia-ctk"],
            "cdi",
            "generate",
            *hook,
            *dirs,
            "--output",
            output,
        ]
        result = recorder.run(command, 90)
        written = result.ok and os.path.exists(output)
        with_cuda = written and "libcuda.so" in open(output, encoding="utf-8").read()  # noqa: SIM115
        warnings = sum("level=warning" in line for line in result.stderr.splitlines())
        attempts.append(
            {
                "command": " ".join(command),
                "result": "written" if written else result.why(),
                "libcuda": with_cuda,
                "stderr": result.stderr.strip()[-3000:],
            }
        )
        row.data["attempts"] = attempts
        roots_said = " ".join(dirs) or "default roots"
        if with_cuda:
            row.detail = f"written with {roots_said} ({warnings} warnings)"
            return
    if not written:
        recorder.fail(row, result)
    row.detail = f"written with {roots_said}, but it mounts no libcuda ({warnings} warnings)"


def load(recorder: Recorder, python: str, spec: str, target: str, *, setup: str = "") -> dict[str, Any]:
    """A YAML spec as JSON data (also written to ``target``, outside every spec dir), read by the
    PyYAML of ``python`` (the venv's, or the node runtime's: ``setup`` puts it on the path)."""
    result = recorder.run([python, "-c", setup + TO_JSON, spec, target], 30)
    if not result.ok:
        raise StepFailed(f"reading {spec}: {result.why()}")
    with open(target, encoding="utf-8") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded
