"""real-node-check: everything cdictk claims, checked on a GPU node in minutes, from the bundle alone.

Run as root on the node: ``python3 BUNDLE/real-node-check --out DIR``. It prints one table, a row per
step as soon as the step ends, and writes into DIR the JSON report (real-node-report.json, rewritten
after every row), the log of every command (real-node-check.log) and both specs. Each step has its own
timeout and the whole check a budget (--budget); a step that fails is recorded with the tail of its
output and the check goes on. At the end it deletes every container it made and its work dir.

It changes nothing on the node: specs go to private directories (never /etc/cdi or /var/run/cdi),
runc keeps its state in the work dir, no engine, driver or MIG setting is touched. The only file made
outside the work dir is a link in /tmp that the carried runc loads its libseccomp through, removed at
the end (realnode/carried.py says why).

The dry run (CI, tests/e2e/test_realnode.py) runs the same steps against a fake GPU node: --driver-root,
--dev-root, --proc-root and --sys-root point at it, and --expect-smi at what its stub nvidia-smi prints.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from realnode import carried, containers, imagefs, nodefacts, pyenv, specs, timing
from realnode.containers import GPU_SCRIPT, Containers, Shim, oci_config, verdict
from realnode.nodefacts import Roots
from realnode.steps import INFO, Recorder, Result, Row, StepFailed, StepSkipped

REPORT = "real-node-report.json"
LOG = "real-node-check.log"
SPEC_FILES = {"cdictk": "spec-cdictk.yaml", "nvidia": "spec-nvidia.yaml"}
NVCC_ARCHES = ("-arch=native", "-arch=sm_90")
KIND = "nvidia.com/gpu"


@dataclass
class State:
    """What the steps found, for the steps after them (None: the step that makes it failed)."""

    work: str
    carried: carried.Carried | None = None
    venv: pyenv.Venv | None = None
    cuda_check: str | None = None
    spec_dirs: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, dict[str, Any]] = field(default_factory=dict)
    image: str | None = None
    containers: Containers | None = None
    runs: bool = False  # runc ran a plain container
    mounted_cgroup: str | None = None  # a cgroup2 mount the check made (a VM without one), undone at the end
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # injected configs, by spec
    device: str = "0"
    facts: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="real-node-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="where the report, log and specs go")
    parser.add_argument("--bundle", metavar="DIR", help="the bundle (default: where this script is)")
    parser.add_argument("--work", metavar="DIR", help="the work dir's parent (default: /tmp, else /var/tmp)")
    parser.add_argument("--budget", type=float, default=420, help="seconds for the whole check (default 420)")
    parser.add_argument("--rounds", type=int, default=25, help="timing rounds (default 25)")
    parser.add_argument("--burst", type=int, default=64, help="GPU containers in the burst (default 64)")
    parser.add_argument("--parallel", type=int, default=16, help="started at a time (default 16)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (containers are deleted)")
    dry = parser.add_argument_group("the dry run on a fake node")
    dry.add_argument("--driver-root", default="/", metavar="DIR")
    dry.add_argument("--dev-root", metavar="DIR", help="default: the driver root")
    dry.add_argument("--proc-root", default="/proc", metavar="DIR")
    dry.add_argument("--sys-root", default="/sys", metavar="DIR")
    dry.add_argument("--nvidia-smi", metavar="PATH", help="the node's nvidia-smi (default: found)")
    dry.add_argument(
        "--nvcc", metavar="PATH|none", help="the node's nvcc (default: found); none: the carried probe alone"
    )
    dry.add_argument(
        "--expect-smi",
        default=r"^GPU \d+: ",
        metavar="REGEX",
        help="a line nvidia-smi -L must print (default: a 'GPU N: ' line)",
    )
    return parser.parse_args(argv)


def work_parent(given: str | None) -> str:
    """The first of /tmp and /var/tmp where programs may run (not mounted noexec)."""
    if given:
        return given
    for place in ("/tmp", "/var/tmp", "/root"):
        with contextlib.suppress(OSError):
            if not os.statvfs(place).f_flag & os.ST_NOEXEC:
                return place
    return tempfile.gettempdir()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("real-node-check: run it as root (runc, device nodes, mounts)", file=sys.stderr)
        return 2
    os.umask(0o022)  # the launchers refuse files others may write
    os.makedirs(args.out, exist_ok=True)
    bundle = os.path.abspath(args.bundle or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.exists(os.path.join(bundle, carried.MANIFEST)):
        print(
            f"real-node-check: {bundle} is not a bundle (no {carried.MANIFEST}): --bundle DIR",
            file=sys.stderr,
        )
        return 2
    roots = Roots(args.driver_root, args.dev_root or args.driver_root, args.proc_root, args.sys_root)
    recorder = Recorder(args.out, REPORT, LOG, args.budget)
    state = State(tempfile.mkdtemp(prefix="realnode-", dir=work_parent(args.work)))
    recorder.sections["check"] = {
        "argv": sys.argv,
        "bundle": bundle,
        "work": state.work,
        "out": args.out,
        "roots": vars(roots),
        "budget_s": args.budget,
    }
    try:
        run_steps(recorder, args, bundle, roots, state)
    finally:
        clean_up(recorder, state, args.keep)
        counts = {
            status: sum(row.status == status for row in recorder.rows) for status in ("pass", "FAIL", "skip")
        }
        took = recorder.elapsed()
        print(
            f"real-node-check: {counts['pass']} passed, {counts['FAIL']} failed, {counts['skip']} skipped "
            f"in {took:.0f} s; report {os.path.join(args.out, REPORT)}",
            flush=True,
        )
        recorder.close()
    return 1 if recorder.failed() else 0


def run_steps(recorder: Recorder, args: argparse.Namespace, bundle: str, roots: Roots, state: State) -> None:
    with recorder.step("node facts") as row:
        row.status = INFO
        facts = nodefacts.gather(recorder, roots, args.nvidia_smi)
        state.facts = facts
        recorder.sections["node"] = facts
        found = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", facts.get("driver_version_file") or "")
        driver = f"driver {found.group(1)}" if found else "no driver version in /proc/driver/nvidia/version"
        row.detail = (
            f"kernel {facts['kernel']}{' (gVisor)' if facts['gvisor'] else ''}, cgroup {facts['cgroup']}, "
            f"{len(facts['devices'])} nvidia device files, "
            f"nvidia-smi wrapper: {facts['nvidia_smi_wrapper']}, "
            f"nvcc: {facts['nvcc'] or 'none'}; {driver}"
        )

    with recorder.step("bundle unpacked, runc runs") as row:
        state.carried = carried.prepare(bundle, state.work)
        recorder.sections["bundle"] = state.carried.manifest
        version = recorder.run([state.carried.runc, "--version"], 20)
        if not version.ok:
            recorder.fail(row, version)
        row.detail = version.stdout.splitlines()[0] + (
            f", libseccomp via {state.carried.seccomp_link}" if state.carried.seccomp_link else ""
        )
        row.data["nvidia_tools"] = sorted(state.carried.nvidia)

    with recorder.step("cdictk installed from the wheels") as row:
        if state.carried is None:
            raise StepSkipped("needs the bundle")
        state.venv = pyenv.install(recorder, state.carried.wheels, os.path.join(state.work, "venv"))
        row.detail = f"venv of {state.venv.base} ({state.venv.version})"

    with recorder.step("CUDA program") as row:
        build_cuda(recorder, row, state, args.nvcc)

    generate_specs(recorder, roots, state)
    with recorder.step("container image (node libc, busybox)") as row:
        build_image(recorder, row, state)
    with recorder.step("runc: a container without GPU") as row:
        recorder.need(15)
        runc_smoke(recorder, row, state)
    with recorder.step("host: probe, CUDA program, nvidia-smi") as row:
        host_baseline(recorder, row, state, args.expect_smi)
    run_ways(recorder, args, roots, state)
    run_timing(recorder, args, state)


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


def generate_specs(recorder: Recorder, roots: Roots, state: State) -> None:
    for name in SPEC_FILES:
        state.spec_dirs[name] = os.path.join(state.work, "cdi", name)
        os.makedirs(state.spec_dirs[name])
    ours = os.path.join(state.spec_dirs["cdictk"], "nvidia.yaml")
    with recorder.step("cdictk cdi generate --mode auto") as row:
        recorder.need(20)
        if state.venv is None:
            raise StepSkipped("needs cdictk installed")
        specs.generate(recorder, row, state.venv, roots, ours)
        shutil.copyfile(ours, os.path.join(recorder.out, SPEC_FILES["cdictk"]))
        state.loaded["cdictk"] = specs.load(
            recorder, state.venv, ours, os.path.join(state.work, "cdictk.json")
        )
        devices = [d["name"] for d in state.loaded["cdictk"].get("devices") or []]
        row.data["devices"] = devices
    with recorder.step("cdictk cdi validate") as row:
        recorder.need(10)
        if state.venv is None or "cdictk" not in state.loaded:
            raise StepSkipped("needs cdictk's spec")
        specs.validate(recorder, row, state.venv, ours)
    with recorder.step("cdictk info") as row:
        recorder.need(10)
        if state.venv is None:
            raise StepSkipped("needs cdictk installed")
        specs.info(recorder, row, state.venv, roots, state.spec_dirs["cdictk"])
    theirs = os.path.join(state.spec_dirs["nvidia"], "nvidia.yaml")
    with recorder.step("nvidia-ctk cdi generate") as row:
        recorder.need(20)
        nvidia = state.carried.nvidia if state.carried else {}
        if "nvidia-ctk" not in nvidia or "nvidia-cdi-hook" not in nvidia:
            raise StepSkipped("NVIDIA's tools are not in the bundle (make real-node-bundle NVIDIA_TOOLS=DIR)")
        if state.venv is None:
            raise StepSkipped("needs cdictk installed (its PyYAML reads the spec)")
        specs.generate_nvidia(recorder, row, nvidia, roots, theirs)
        shutil.copyfile(theirs, os.path.join(recorder.out, SPEC_FILES["nvidia"]))
        state.loaded["nvidia"] = specs.load(
            recorder, state.venv, theirs, os.path.join(state.work, "nvidia.json")
        )
    with recorder.step("specs compared item by item") as row:
        recorder.need(10)
        if state.venv is None or len(state.loaded) < 2:
            raise StepSkipped("needs both specs")
        compared = specs.compare(
            state.loaded["nvidia"],
            state.loaded["cdictk"],
            roots.driver,
            specs.step_table(recorder, state.venv),
        )
        recorder.sections["comparison"] = compared
        row.detail = specs.summary(compared)
    state.device = specs.first_gpu(*state.loaded.values()) if state.loaded else "0"


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


def build_image(recorder: Recorder, row: Row, state: State) -> None:
    if state.carried is None:
        raise StepSkipped("needs the bundle")
    programs = {"cuda-probe": state.carried.probe}
    if state.cuda_check:
        programs["cuda-check"] = state.cuda_check
    smi = spec_smi(state.loaded["cdictk"]) if "cdictk" in state.loaded else None
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
    if state.carried is None or "cdictk" not in state.loaded:
        raise StepSkipped("needs the bundle and cdictk's spec")
    mounts = spec_mounts(state.loaded["cdictk"])
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
    smi = spec_smi(state.loaded["cdictk"])
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


def injected(recorder: Recorder, state: State, spec: str, args: list[str]) -> dict[str, Any]:
    """A config for ``args`` with the chosen GPU of ``spec``'s dir injected (rootfs set per container)."""
    if state.venv is None:
        raise StepSkipped("needs cdictk installed")
    path = os.path.join(state.work, f"config-{spec}-{len(state.templates)}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(oci_config("/nonexistent", args), handle)
    containers.inject(recorder, state.venv, state.spec_dirs[spec], f"{KIND}={state.device}", path)
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
    request_env = f"NVIDIA_VISIBLE_DEVICES={state.device}"
    with recorder.step("GPU container: cdictk-runtime, env request") as row:
        recorder.need(30)
        if shim is None:
            raise StepSkipped("needs cdictk-runtime")
        gpu_way(row, state, args.expect_smi, oci_config("/", script, [request_env]), shim)
    with recorder.step("GPU container: cdictk-runtime, annotation") as row:
        recorder.need(30)
        if shim is None:
            raise StepSkipped("needs cdictk-runtime")
        config = oci_config("/", script)
        config["annotations"] = {"cdi.k8s.io/realnode": f"{KIND}={state.device}"}
        gpu_way(row, state, args.expect_smi, config, shim)
    with recorder.step("GPU container: legacy prestart hook") as row:
        recorder.need(30)
        if shim is None:
            raise StepSkipped("needs cdictk's prestart hook")
        config = oci_config("/", script, [request_env])
        path, hook_args = shim.prestart
        env = [f"{key}={value}" for key, value in shim.env.items()]
        config["hooks"] = {"prestart": [{"path": path, "args": hook_args, "env": env}]}
        gpu_way(row, state, args.expect_smi, config)


def run_timing(recorder: Recorder, args: argparse.Namespace, state: State) -> None:
    labels = {"none": "no GPU", "cdictk": "cdictk's spec + hook", "nvidia": "NVIDIA's spec + hooks"}
    with recorder.step(f"start time, {args.rounds} rounds interleaved") as row:
        recorder.need(40)
        if state.containers is None or not state.runs:
            raise StepSkipped("needs the image and a runc that runs")
        configs = {labels["none"]: oci_config("/", ["/bin/true"])}
        for spec in ("cdictk", "nvidia"):
            if spec in state.loaded:
                configs[labels[spec]] = injected(recorder, state, spec, ["/bin/true"])
        samples = timing.interleaved(recorder, row, state.containers, configs, args.rounds)
        figures = timing.added(samples, labels["none"])
        names = {labels["none"]: "no GPU", labels["cdictk"]: "cdictk", labels["nvidia"]: "NVIDIA"}
        row.detail = timing.describe(figures, labels["none"], names, args.rounds)
        report: dict[str, Any] = dict(figures)
        found = timing.ratio(figures, labels["cdictk"], labels["nvidia"])
        if found is not None:
            report["ratio_cdictk_over_nvidia"] = {"added": found}
        row.data["figures"] = report
        recorder.sections["timing"] = report
    with recorder.step(f"burst: {args.burst} GPU containers, {args.parallel} at a time") as row:
        recorder.need(40)
        if state.containers is None or not state.runs or "cdictk" not in state.loaded:
            raise StepSkipped("needs the image, a runc that runs and cdictk's spec")
        config = injected(recorder, state, "cdictk", [f"{imagefs.PROGRAM_DIR}/cuda-probe", "--dlopen"])
        recorder.sections["burst"] = timing.burst(
            recorder, row, state.containers, config, total=args.burst, parallel=args.parallel
        )


def clean_up(recorder: Recorder, state: State, keep: bool) -> None:
    with recorder.step("cleanup") as row:
        left = state.containers.cleanup() if state.containers is not None else []
        if state.carried is not None and state.carried.seccomp_link:
            with contextlib.suppress(OSError):
                os.unlink(state.carried.seccomp_link)
        if state.mounted_cgroup:
            unmounted = recorder.run(["umount", state.mounted_cgroup], 15)
            if not unmounted.ok:
                recorder.run(["umount", "-l", state.mounted_cgroup], 15)
        if not keep:
            shutil.rmtree(state.work, ignore_errors=True)
        row.detail = f"containers left: {len(left)}; work dir {'kept: ' + state.work if keep else 'removed'}"
        if left:
            raise StepFailed(f"runc would not delete {', '.join(left)}; " + row.detail)


if __name__ == "__main__":
    sys.exit(main())
