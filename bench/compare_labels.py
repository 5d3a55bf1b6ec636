"""`cdictk node-labels` against NVIDIA's gpu-feature-discovery (GFD) on the fake GPU nodes.

For each case (a fake node, a MIG strategy, time-slicing replicas), builds the node under a temp dir,
writes one settings file in the shape both read (version v1, flags.migStrategy, sharing.timeSlicing),
runs GFD once (``--oneshot --no-timestamp --use-node-feature-api=false --output-file``) and
``cdictk node-labels --config`` on it, and compares the two NFD feature files label by label: what
only GFD writes, what only cdictk writes, and what both write with other values. Prints a row per case
and the differences, and a Markdown table for the docs.

GFD has no --sys-root: it reads the PCI functions of /sys/bus/pci/devices (the GPUs' classes for
gpu.mode, their configuration spaces for vgpu.*), so it runs in a private mount namespace (unshare)
with the node's copy bound there; NVML is the node's fake libnvidia-ml.so.1 through LD_LIBRARY_PATH,
and the DMI product name the node's, through --machine-type-file. Build GFD from NVIDIA's source
tree (NVIDIA/k8s-device-plugin, which vendors its modules) with a Go as new as its go.mod asks:
``CGO_ENABLED=1 GOFLAGS=-mod=vendor go build -o /tmp/gfd ./cmd/gpu-feature-discovery``.

It is a report, not a test: it exits 0 whatever it finds (2 without --gfd). Needs root (the nodes
are mknod'd, the bind) and gcc.
Usage: python -m bench.compare_labels --gfd PATH [--case NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import yaml

from cdictk.labels.featurefile import parse
from tests.fakenode.node import BUSES, PRESETS, FakeNode, Preset, _mig, build_node, fake_gpu, sysfs_bus

SINGLE_MIG = dataclasses.replace(
    PRESETS["single"],
    name="single-mig",
    gpus=(fake_gpu(0, BUSES[0], mig="enabled"),),
    migs=(_mig(0, 7, "1g.10gb", 1, 9856), _mig(1, 8, "1g.10gb", 1, 9856)),
)
PRESET_OF = {"single": PRESETS["single"], "eight": PRESETS["eight"], "single-mig": SINGLE_MIG}


@dataclass(frozen=True)
class Case:
    name: str
    preset: str
    strategy: str
    replicas: tuple[tuple[str, int], ...] = ()  # time-slicing: (resource, replicas)
    rename_by_default: bool = False
    pci_class: int | None = None  # every GPU's PCI class rewritten in sysfs (0x030000: graphics)

    def settings(self) -> dict[str, object]:
        data: dict[str, object] = {"version": "v1", "flags": {"migStrategy": self.strategy}}
        if self.replicas:
            slicing: dict[str, object] = {
                "resources": [{"name": name, "replicas": count} for name, count in self.replicas]
            }
            if self.rename_by_default:
                slicing["renameByDefault"] = True
            data["sharing"] = {"timeSlicing": slicing}
        return data


CASES = (
    Case("single, none", "single", "none"),
    Case("single, single", "single", "single"),
    Case("single, mixed", "single", "mixed"),
    Case("single, none, 4 replicas", "single", "none", (("nvidia.com/gpu", 4),)),
    Case("single, none, 4 replicas renamed", "single", "none", (("nvidia.com/gpu", 4),), True),
    Case("single, none, VGA class", "single", "none", pci_class=0x030000),
    Case("eight, none", "eight", "none"),
    Case("eight, single (invalid)", "eight", "single"),
    Case("eight, mixed", "eight", "mixed"),
    Case("eight, none, 2 replicas", "eight", "none", (("nvidia.com/gpu", 2),)),
    Case(
        "eight, mixed, replicas",
        "eight",
        "mixed",
        (("nvidia.com/gpu", 2), ("nvidia.com/mig-1g.10gb", 3)),
    ),
    Case("single-mig, single", "single-mig", "single"),
    Case("single-mig, single, 2 replicas", "single-mig", "single", (("nvidia.com/gpu", 2),)),
    Case("single-mig, mixed", "single-mig", "mixed"),
)


@dataclass
class Outcome:
    case: Case
    gfd: dict[str, str] | None
    cdictk: dict[str, str] | None
    error: str = ""

    @property
    def only_gfd(self) -> list[str]:
        return sorted(set(self.gfd or {}) - set(self.cdictk or {}))

    @property
    def only_cdictk(self) -> list[str]:
        return sorted(set(self.cdictk or {}) - set(self.gfd or {}))

    @property
    def differ(self) -> list[str]:
        both = set(self.gfd or {}) & set(self.cdictk or {})
        return sorted(name for name in both if (self.gfd or {})[name] != (self.cdictk or {})[name])


def run(
    command: list[str], output: str, env: dict[str, str] | None = None
) -> tuple[dict[str, str] | None, str]:
    if os.path.exists(output):
        os.unlink(output)
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0 or not os.path.exists(output):
        last = [line for line in result.stderr.splitlines() if line.strip()][-1:] or ["(no message)"]
        return None, f"exit {result.returncode}: {last[0]}"
    with open(output, encoding="utf-8") as handle:
        return parse(handle.read())[0], ""


def gfd_command(gfd: str, node: FakeNode, settings: str, output: str) -> list[str]:
    """GFD in a private mount namespace where /sys/bus/pci/devices is the node's."""
    unshare = shutil.which("unshare") or sys.exit("compare_labels needs unshare (util-linux)")
    devices = os.path.join(node.sys, "bus/pci/devices")
    script = 'set -e; mount --bind "$1" /sys/bus/pci/devices; shift; exec "$@"'
    flags = [
        "--oneshot",
        "--no-timestamp",
        "--use-node-feature-api=false",
        "--device-discovery-strategy=nvml",
        f"--machine-type-file={node.sys}/class/dmi/id/product_name",
        f"--config-file={settings}",
        f"--output-file={output}",
    ]
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", devices, gfd, *flags]


def compare(case: Case, node: FakeNode, gfd: str, scratch: str) -> Outcome:
    settings = os.path.join(scratch, "settings.yaml")
    with open(settings, "w", encoding="utf-8") as handle:
        yaml.safe_dump(case.settings(), handle)
    if case.pci_class is not None:
        for gpu in node.preset.gpus:
            with open(os.path.join(node.sys, "bus/pci/devices", sysfs_bus(gpu), "class"), "w") as out:
                out.write(f"0x{case.pci_class:06x}\n")
    env = {**os.environ, "LD_LIBRARY_PATH": node.lib_dir}
    theirs_at, ours_at = os.path.join(scratch, "gfd"), os.path.join(scratch, "cdictk")
    theirs, error = run(gfd_command(gfd, node, settings, theirs_at), theirs_at, env)
    cdictk = [sys.executable, "-m", "cdictk", "node-labels", *node.cli_args(), "--config", settings]
    ours, our_error = run([*cdictk, "--output", ours_at], ours_at)
    problems = "; ".join(f"{who}: {text}" for who, text in (("GFD", error), ("cdictk", our_error)) if text)
    return Outcome(case, theirs, ours, problems)


def lines(outcome: Outcome) -> list[str]:
    found = [f"  only GFD: {name}={(outcome.gfd or {})[name]}" for name in outcome.only_gfd]
    found += [f"  only cdictk: {name}={(outcome.cdictk or {})[name]}" for name in outcome.only_cdictk]
    found += [
        f"  differ: {name}: GFD {(outcome.gfd or {})[name]!r}, cdictk {(outcome.cdictk or {})[name]!r}"
        for name in outcome.differ
    ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--gfd", metavar="PATH", help="NVIDIA's gpu-feature-discovery binary")
    parser.add_argument(
        "--case", action="append", choices=[case.name for case in CASES], help="repeatable; default all"
    )
    args = parser.parse_args()
    if not args.gfd:
        print("no --gfd: give the path of NVIDIA's gpu-feature-discovery to compare against", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench/compare_labels.py needs root: the fake nodes' device nodes are made with mknod")
        return 0
    gfd = os.path.abspath(args.gfd)
    print(f"GFD: {gfd}")
    print(f"cdictk: {sys.executable} -m cdictk node-labels\n")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="cdictk-labels-") as scratch:
        cache = os.path.join(scratch, "cache")
        for number, case in enumerate(case for case in CASES if not args.case or case.name in args.case):
            work = os.path.join(scratch, str(number))
            os.makedirs(work)
            preset: Preset = PRESET_OF[case.preset]
            node = build_node(os.path.join(work, "root"), preset, cache)
            outcome = compare(case, node, gfd, work)
            outcomes.append(outcome)
            state = outcome.error or (
                f"{len(outcome.gfd or {})} labels from GFD, {len(outcome.cdictk or {})} from cdictk: "
                f"{len(outcome.only_gfd)} only GFD, {len(outcome.only_cdictk)} only cdictk, "
                f"{len(outcome.differ)} differ"
            )
            print(f"{case.name}: {state}")
            for line in lines(outcome):
                print(line)
    print("\n| case | labels (GFD / cdictk) | only GFD | only cdictk | differ |")
    print("|---|---|---|---|---|")
    for outcome in outcomes:
        only_ours = ", ".join(name.removeprefix("nvidia.com/") for name in outcome.only_cdictk) or "-"
        print(
            f"| {outcome.case.name} | {len(outcome.gfd or {})} / {len(outcome.cdictk or {})} | "
            f"{len(outcome.only_gfd) or '-'} | {only_ours} | {len(outcome.differ) or '-'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
