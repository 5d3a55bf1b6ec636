"""What the GPU containers need and are measured against, each a row: the CUDA program (the node's
nvcc), the image (the node's libc, busybox, the programs), a plain runc container, and the same
programs run on the host.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from realnode import containers, imagefs, nodefacts
from realnode.checkstate import State
from realnode.containers import Containers, oci_config, verdict
from realnode.recorder import Recorder, Result, Row, StepFailed, StepSkipped

NVCC_ARCHES = ("-arch=native", "-arch=sm_90")


def build_cuda(recorder: Recorder, row: Row, state: State, nvcc_choice: str | None) -> None:
    """The node's nvcc builds the CUDA program (-cudart static); without nvcc, the carried probe alone."""
    if state.carried is None:
        raise StepSkipped("needs the bundle")
    nvcc = nvcc_choice if nvcc_choice is not None else state.facts.get("nvcc")
    if not nvcc or nvcc == "none":
        row.detail = "no nvcc: the carried probe alone (dlopen libcuda.so.1, cuInit, cuDeviceGetCount)"
        return
    target = os.path.join(state.work, "bin", "cuda-check")
    tried = []
    for arch in NVCC_ARCHES:
        built = recorder.run(
            [nvcc, "-O2", "-cudart", "static", arch, "-o", target, state.carried.cuda_source], 180
        )
        if built.ok:
            state.cuda_check = target
            row.detail = f"built with {nvcc} {arch} -cudart static"
            return
        tried.append(f"{arch}: {built.why()}")
        row.tail = built.tail()
    raise StepFailed("nvcc failed (" + "; ".join(tried) + "); the containers run the carried probe alone")


def spec_mounts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    edits = [
        spec.get("containerEdits") or {},
        *[d.get("containerEdits") or {} for d in spec.get("devices") or []],
    ]
    return [mount for edit in edits for mount in edit.get("mounts") or []]


def spec_smi(spec: dict[str, Any]) -> str | None:
    """The nvidia-smi the spec mounts (its host path)."""
    return next(
        (str(m["hostPath"]) for m in spec_mounts(spec) if str(m["containerPath"]).endswith("/nvidia-smi")),
        None,
    )


def cdictk_spec(state: State) -> dict[str, Any] | None:
    """cdictk's spec as the node's Python generated it, else as the node runtime did (a node whose
    Python cannot run cdictk), else None."""
    return state.loaded.get("cdictk") or state.loaded.get("runtime")


def build_image(recorder: Recorder, row: Row, state: State) -> None:
    if state.carried is None:
        raise StepSkipped("needs the bundle")
    programs = {"cuda-probe": state.carried.probe}
    if state.cuda_check:
        programs["cuda-check"] = state.cuda_check
    ours = cdictk_spec(state)
    smi = spec_smi(ours) if ours is not None else None
    smi = smi or nodefacts.elf_smi(state.facts.get("nvidia_smi") or [])
    image = os.path.join(state.work, "image")
    missing = imagefs.build(recorder, image, state.carried.busybox, programs, [smi] if smi else [])
    state.image = image
    state.containers = Containers(recorder, state.carried.runc, state.work, image)
    files = sum(len(names) for _, _, names in os.walk(image))
    row.detail = f"{files} files; programs: {', '.join(programs)}; libraries for {smi or 'no nvidia-smi'}"
    if missing:
        row.detail += f"; not found on the node: {', '.join(missing)} (the spec must bring them)"


def cgroup_mounted() -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return any(" - cgroup2 " in line or " - cgroup " in line for line in handle)


def runc_smoke(recorder: Recorder, row: Row, state: State) -> None:
    """One plain container: whether runc runs here at all (gVisor, a VM without cgroups), before the
    GPU steps spend their timeouts. Without any cgroup mount, cgroup2 is mounted for the check."""
    if state.containers is None:
        raise StepSkipped("needs the image")
    containers = state.containers

    def attempt() -> Result:
        bundle, container = containers.bundle("plain", lambda rootfs: oci_config(rootfs, ["/bin/echo", "ok"]))
        return containers.run(bundle, container, timeout=30)

    result = attempt()
    if not result.ok and not cgroup_mounted() and shutil.which("mount"):
        mounted = recorder.run(["mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup"], 15)
        if mounted.ok:
            state.mounted_cgroup = "/sys/fs/cgroup"
            result = attempt()
    if not result.ok or result.stdout.strip() != "ok":
        recorder.fail(
            row, result, f"runc cannot run a container here, the container steps skip: {result.why()}"
        )
    state.runs = True
    row.detail = f"runc run of echo: {result.ms:.0f} ms"
    if state.mounted_cgroup:
        row.detail += "; no cgroup mount on the node: cgroup2 mounted at /sys/fs/cgroup for the check"


def host_baseline(recorder: Recorder, row: Row, state: State, expect_smi: str) -> None:
    """The same programs on the host, with the driver's library directories from cdictk's spec on
    LD_LIBRARY_PATH: tells a broken node from a broken container."""
    ours = cdictk_spec(state)
    if state.carried is None or ours is None:
        raise StepSkipped("needs the bundle and cdictk's spec")
    mounts = spec_mounts(ours)
    lib_dirs = sorted(
        {
            os.path.dirname(str(m["hostPath"]))
            for m in mounts
            if os.path.basename(str(m["containerPath"])).startswith(("libcuda.so", "libnvidia-ml.so"))
        }
    )
    env = {"PATH": containers.HOST_PATH, "LD_LIBRARY_PATH": ":".join(lib_dirs)}
    output = []
    for name, command in (
        ("probe", [state.carried.probe]),
        ("cuda", [state.cuda_check] if state.cuda_check else []),
    ):
        if command:
            result = recorder.run(command, 120, env=env)
            output += [result.stdout.strip(), f"{name}-exit={result.returncode}"]
    smi = spec_smi(ours)
    output.append(f"smi-path={smi}")
    if smi:
        result = recorder.run([smi, "-L"], 60, env=env)
        output += [result.stdout.strip(), f"smi-exit={result.returncode}"]
    found = verdict("\n".join(output), expect_smi)
    row.data["output"] = "\n".join(output)
    row.data["LD_LIBRARY_PATH"] = env["LD_LIBRARY_PATH"]
    row.detail = found.detail
    if not found.ok:
        raise StepFailed(found.detail)
