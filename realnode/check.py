"""real-node-check: everything cdictk claims, checked on a GPU node in minutes, from the bundle alone.

Run as root on the node: ``python3 BUNDLE/real-node-check --out DIR``. It prints one table, a row per
step as soon as the step ends, and writes into DIR the JSON report (real-node-report.json, rewritten
after every row), the log of every command (real-node-check.log) and both specs. Each step has its own
timeout and the whole check a budget (--budget); a step that fails is recorded with the tail of its
output and the check goes on. At the end it deletes every container it made and its work dir.

It changes nothing on the node: specs go to private directories (never /etc/cdi or /var/run/cdi),
runc keeps its state in the work dir, the node runtime the bundle carries is installed under a prefix
there (never /opt/cdictk), no engine, driver or MIG setting is touched. The only file made
outside the work dir is a link in /tmp that the carried runc loads its libseccomp through, removed at
the end (realnode/carried.py says why).

The dry run (CI, tests/e2e/test_realnode.py) runs the same steps against a fake GPU node: --driver-root,
--dev-root, --proc-root and --sys-root point at it, and --expect-smi at what its stub nvidia-smi prints.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import tempfile

from realnode import baseline, bundledruntime, carried, gpuways, nodefacts, pyenv, specsteps, timing
from realnode.checkstate import State
from realnode.nodefacts import Roots
from realnode.recorder import INFO, Recorder, StepFailed, StepSkipped

REPORT = "real-node-report.json"
LOG = "real-node-check.log"


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
        baseline.build_cuda(recorder, row, state, args.nvcc)

    specsteps.run_spec_steps(recorder, roots, state)
    bundledruntime.run_runtime_steps(recorder, roots, state)
    with recorder.step("container image (node libc, busybox)") as row:
        baseline.build_image(recorder, row, state)
    with recorder.step("runc: a container without GPU") as row:
        recorder.need(15)
        baseline.runc_smoke(recorder, row, state)
    with recorder.step("host: probe, CUDA program, nvidia-smi") as row:
        baseline.host_baseline(recorder, row, state, args.expect_smi)
    gpuways.run_ways(recorder, args, roots, state)
    timing.run_timing(recorder, args, state)


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
