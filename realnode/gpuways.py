"""The ways a GPU reaches a container, a row each: a spec injected beforehand (cdictk's, NVIDIA's),
cdictk-runtime asked by env and by annotation, and the legacy prestart hook; then cdictk's again through
the node runtime the bundle carries (realnode/bundledruntime.py): its spec's hook, its cdictk-runtime
front and its prestart hook, as an engine on a node without a usable Python runs them.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from typing import Any

from realnode import containers
from realnode.checkstate import KIND, State
from realnode.containers import GPU_SCRIPT, Shim, oci_config, verdict
from realnode.nodefacts import Roots
from realnode.recorder import Recorder, Row, StepFailed, StepSkipped


def injector(state: State, spec: str) -> str:
    """The cdictk that injects ``spec``'s devices: the node runtime's for its own spec (its rows need
    no Python of the node's), the venv's for the others."""
    if spec == "runtime":
        if state.runtime is None:
            raise StepSkipped("needs the node runtime")
        return state.runtime.stable("cdictk")
    if state.venv is None:
        raise StepSkipped("needs cdictk installed")
    return state.venv.script("cdictk")


def injected(recorder: Recorder, state: State, spec: str, args: list[str]) -> dict[str, Any]:
    """A config for ``args`` with the chosen GPU of ``spec``'s dir injected (rootfs set per container)."""
    cdictk = injector(state, spec)
    path = os.path.join(state.work, f"config-{spec}-{len(state.templates)}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(oci_config("/nonexistent", args), handle)
    containers.inject(recorder, cdictk, state.spec_dirs[spec], f"{KIND}={state.device}", path)
    with open(path, encoding="utf-8") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def gpu_way(row: Row, state: State, expect: str, config: dict[str, Any], shim: Shim | None = None) -> None:
    """One container of ``config`` (its rootfs set here), run by runc or through the shim."""
    if state.containers is None or not state.runs:
        raise StepSkipped("needs the image and a runc that runs")

    def config_for(rootfs: str) -> dict[str, Any]:
        made = copy.deepcopy(config)
        made["root"]["path"] = rootfs
        return made

    bundle, container = state.containers.bundle("gpu", config_for)
    result = state.containers.run(
        bundle, container, shim.runtime if shim else None, shim.env if shim else None, timeout=120
    )
    found = verdict(result.stdout, expect)
    row.data["output"] = result.stdout[-4000:]
    row.detail = found.detail
    if not result.ok or not found.ok:
        row.tail = result.tail()
        raise StepFailed(("" if result.ok else result.why() + " | ") + found.detail)


def run_ways(recorder: Recorder, args: argparse.Namespace, roots: Roots, state: State) -> None:
    script = ["/bin/sh", "-c", GPU_SCRIPT]
    for spec, title in (("cdictk", "cdictk's spec"), ("nvidia", "NVIDIA's spec and hooks")):
        with recorder.step(f"GPU container: {title}, injected") as row:
            recorder.need(30)
            if spec not in state.loaded:
                raise StepSkipped(f"needs {title}")
            row.data["device"] = f"{KIND}={state.device}"
            gpu_way(row, state, args.expect_smi, injected(recorder, state, spec, script))
    shim: Shim | None = None
    with recorder.step("cdictk-runtime and prestart set up") as row:
        recorder.need(20)
        if state.venv is None or state.carried is None or "cdictk" not in state.loaded:
            raise StepSkipped("needs cdictk and its spec")
        shim = containers.shim(
            recorder,
            row,
            state.venv,
            runc=state.carried.runc,
            spec_dir=state.spec_dirs["cdictk"],
            roots=roots,
            work=state.work,
        )
    shim_ways(recorder, args, state, shim, lead="GPU container: ", lacking="needs cdictk-runtime")
    runtime_ways(recorder, args, roots, state)


def runtime_ways(recorder: Recorder, args: argparse.Namespace, roots: Roots, state: State) -> None:
    """The node runtime's rows: its spec's hook, then its shim and prestart hook from the prefix's
    stable paths (what an engine is configured with)."""
    script = ["/bin/sh", "-c", GPU_SCRIPT]
    lacking = "needs the node runtime and its spec"
    with recorder.step("node runtime: spec + hook, injected") as row:
        recorder.need(30)
        if state.runtime is None or "runtime" not in state.loaded:
            raise StepSkipped(lacking)
        row.data["device"] = f"{KIND}={state.device}"
        gpu_way(row, state, args.expect_smi, injected(recorder, state, "runtime", script))
    shim = None
    if state.runtime is not None and state.carried is not None and "runtime" in state.loaded:
        shim = containers.runtime_shim(
            state.runtime.prefix,
            runc=state.carried.runc,
            spec_dir=state.spec_dirs["runtime"],
            roots=roots,
            work=state.work,
        )
    shim_ways(recorder, args, state, shim, lead="node runtime: ", lacking=lacking)


def shim_ways(
    recorder: Recorder, args: argparse.Namespace, state: State, shim: Shim | None, *, lead: str, lacking: str
) -> None:
    """Three rows named ``lead`` + the way: cdictk-runtime asked by env and by annotation, and the
    legacy prestart hook; each skips, saying ``lacking``, without ``shim``."""
    script = ["/bin/sh", "-c", GPU_SCRIPT]
    request_env = f"NVIDIA_VISIBLE_DEVICES={state.device}"
    with recorder.step(f"{lead}cdictk-runtime, env request") as row:
        recorder.need(30)
        if shim is None:
            raise StepSkipped(lacking)
        gpu_way(row, state, args.expect_smi, oci_config("/", script, [request_env]), shim)
    with recorder.step(f"{lead}cdictk-runtime, annotation") as row:
        recorder.need(30)
        if shim is None:
            raise StepSkipped(lacking)
        config = oci_config("/", script)
        config["annotations"] = {"cdi.k8s.io/realnode": f"{KIND}={state.device}"}
        gpu_way(row, state, args.expect_smi, config, shim)
    with recorder.step(f"{lead}legacy prestart hook") as row:
        recorder.need(30)
        if shim is None:
            raise StepSkipped(lacking)
        config = oci_config("/", script, [request_env])
        path, hook_args = shim.prestart
        env = [f"{key}={value}" for key, value in shim.env.items()]
        config["hooks"] = {"prestart": [{"path": path, "args": hook_args, "env": env}]}
        gpu_way(row, state, args.expect_smi, config)
