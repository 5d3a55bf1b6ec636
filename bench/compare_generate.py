"""`cdictk cdi generate` against NVIDIA's `nvidia-ctk cdi generate` on the fake GPU nodes.

For each preset of tests/fakenode/node.py, builds the node under a temp dir, runs both generators on
it (``--mode nvml``, device names by index and UUID, NVIDIA's hooks at /usr/bin/nvidia-cdi-hook) and
normalises both specs into comparable sets: the device names; per device its device nodes (major,
minor, mode, group), the links its hooks make, its hook steps, mounts, env and extra groups; and for
the common edits the device nodes, mounts, links, ld cache folders, env and hook steps. cdictk's
batched hook is taken apart into NVIDIA's steps (--link/--device-link: create-symlinks,
--host-driver-version: enable-cuda-compat, --folder: update-ldcache, and so on, from
cdictk.startpath.hooks.steps). Prints, per preset, what NVIDIA has that cdictk lacks and the reverse, and a
one-line summary. With --tree, also with --driver-root at the driver's own tree where that differs.

It is a report, not a test: it exits 0 whatever it finds (2 without --nvidia-ctk). nvidia-ctk has no
--proc-root or --sys-root: it reads the host's /proc (MIG capability minors from
/proc/driver/nvidia-caps/mig-minors) and sysfs (each GPU's /dev/dri nodes from
/sys/bus/pci/devices/BUS/drm, a custom firmware path from /sys/module/firmware_class), where cdictk
reads the node's. By default (--host-view node) nvidia-ctk runs in a private mount namespace (unshare)
with those three directories of the node bound over the host's, so that both read the same node;
--host-view host runs it as it is, and then its DRM nodes and firmware path are the host's. MIG devices
are compared like full GPUs: the fake NVML answers the GPU- and compute-instance calls nvidia-ctk makes
for them. Only where nvidia-ctk fails on a node with MIG devices (with --host-view host, on a host without
/proc/driver/nvidia-caps/mig-minors; a newer nvidia-ctk calling an NVML function the fake lacks, which
its error names) are both run again on the full GPUs not in MIG mode, and the report says so.
Needs root (the nodes are mknod'd, the binds) and gcc.
Usage: python -m bench.compare_generate --nvidia-ctk PATH [--preset NAME ...] [--tree] [--host-view host]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cdictk as cdictk_package
from cdictk.startpath.hooks.steps import BATCHED
from realnode.speccompare import CATEGORIES, reduce_edits
from tests.fakenode.node import PRESETS, FakeNode, build_node

NVIDIA_HOOK = "/usr/bin/nvidia-cdi-hook"
# What nvidia-ctk reads from the host whatever its roots: with --host-view node, the node's own copy
# of each is bound over the host's for it.
HOST_READS = ("/proc/driver", "/sys/bus/pci/devices", "/sys/module/firmware_class/parameters")
COMMON_ARGS = ["--mode", "nvml", "--device-name-strategy", "index", "--device-name-strategy", "uuid"]
# cdictk's batched hook's options, by the NVIDIA hook step each belongs to.
STEP_OF_OPTION = {
    option: step.name for step in BATCHED for option in (*step.values, *step.lists, *step.flags)
}

Sets = dict[str, set[str]]


@dataclass
class Spec:
    """A spec as comparable sets: the common edits' and each device's, by category."""

    common: Sets = field(default_factory=dict)
    devices: dict[str, Sets] = field(default_factory=dict)


def normalise_edits(edits: Mapping[str, Any], root: str) -> Sets:
    """One containerEdits as sets of text, one per category, as the real-node check reduces them
    (``root``, the node's, shows as <root>), and the hooks' own env too."""
    sets = reduce_edits(edits, root, STEP_OF_OPTION)
    sets["env"].update(
        f"{variable} (hook env)" for hook in edits.get("hooks") or [] for variable in hook.get("env") or []
    )
    return sets


def normalise(spec: Mapping[str, Any], root: str) -> Spec:
    return Spec(
        normalise_edits(spec.get("containerEdits") or {}, root),
        {
            device["name"]: normalise_edits(device.get("containerEdits") or {}, root)
            for device in spec.get("devices") or []
        },
    )


@dataclass
class Difference:
    """Per category, what NVIDIA has that cdictk lacks and the reverse."""

    nvidia_only: dict[str, set[str]] = field(default_factory=dict)
    cdictk_only: dict[str, set[str]] = field(default_factory=dict)

    def add(self, category: str, nvidia: Iterable[str], cdictk: Iterable[str]) -> None:
        nvidia, cdictk = set(nvidia), set(cdictk)
        if nvidia - cdictk:
            self.nvidia_only.setdefault(category, set()).update(nvidia - cdictk)
        if cdictk - nvidia:
            self.cdictk_only.setdefault(category, set()).update(cdictk - nvidia)

    def empty(self) -> bool:
        return not self.nvidia_only and not self.cdictk_only

    def lines(self, indent: str) -> list[str]:
        out = []
        for side, found in (("NVIDIA only", self.nvidia_only), ("cdictk only", self.cdictk_only)):
            for category in sorted(found, key=lambda c: (c not in CATEGORIES, c)):
                out.append(f"{indent}{side}, {category}:")
                out += [f"{indent}  {item}" for item in sorted(found[category])]
        return out


def compare(nvidia: Spec, cdictk: Spec) -> tuple[Difference, Difference, dict[str, Difference]]:
    """Device names, common edits, and per device (of those both have) their differences."""
    names = Difference()
    names.add("devices", nvidia.devices, cdictk.devices)
    common = Difference()
    for category in CATEGORIES:
        common.add(category, nvidia.common.get(category, ()), cdictk.common.get(category, ()))
    devices = {}
    for name in sorted(nvidia.devices.keys() & cdictk.devices.keys()):
        difference = Difference()
        for category in CATEGORIES:
            difference.add(category, nvidia.devices[name][category], cdictk.devices[name][category])
        devices[name] = difference
    return names, common, devices


@dataclass
class Run:
    spec: dict[str, Any] | None
    error: str = ""
    warnings: int = 0


def generate(command: list[str], output: str) -> Run:
    if os.path.exists(output):
        os.unlink(output)
    result = subprocess.run([*command, "--output", output], capture_output=True, text=True, check=False)
    warnings = sum("warning" in line.lower() for line in result.stderr.splitlines())
    if result.returncode != 0 or not os.path.exists(output):
        last = [line for line in result.stderr.splitlines() if line.strip()][-1:] or ["(no message)"]
        return Run(None, f"exit {result.returncode}: {last[0]}", warnings)
    with open(output, encoding="utf-8") as handle:
        return Run(json.load(handle), "", warnings)


def roots(args: list[str]) -> list[str]:
    """--driver-root and --dev-root out of cdictk's roots flags: nvidia-ctk has no --proc-root,
    --sys-root."""
    kept = []
    for name, value in zip(args[::2], args[1::2], strict=True):
        if name in ("--driver-root", "--dev-root"):
            kept += [name, value]
    return kept


def node_view(node: FakeNode) -> tuple[list[str], list[str]]:
    """A command prefix that runs a program in a private mount namespace where the node's copies of
    HOST_READS are bound over the host's, and the paths it binds."""
    bound = [path for path in HOST_READS if os.path.isdir(node.root + path)]
    script = "set -e; " + "".join(f'mount --bind "$1" {path}; shift; ' for path in bound) + 'exec "$@"'
    unshare = shutil.which("unshare") or sys.exit("--host-view node needs unshare (util-linux)")
    sources = [node.root + path for path in bound]
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", *sources], bound


@dataclass(frozen=True)
class Generators:
    cdictk: list[str]  # the command
    nvidia_ctk: str
    view: str  # "node": nvidia-ctk sees the node's HOST_READS; "host": the host's


def report(label: str, node: FakeNode, generators: Generators, cdictk_roots: list[str]) -> str:
    """Print the comparison of one node under one set of roots; return its summary line."""
    scratch = os.path.dirname(node.root)
    prefix, bound = node_view(node) if generators.view == "node" else ([], [])
    nvidia_command = [
        *prefix,
        generators.nvidia_ctk,
        "cdi",
        "generate",
        *roots(cdictk_roots),
        *COMMON_ARGS,
        "--format",
        "json",
        "--nvidia-cdi-hook-path",
        NVIDIA_HOOK,
    ]
    cdictk_command = [*generators.cdictk, "cdi", "generate", *cdictk_roots, *COMMON_ARGS, "--format", "json"]
    print(f"== {label}")
    print(f"   roots: {' '.join(roots(cdictk_roots))} (cdictk also: procfs and sysfs of the node)")
    print(
        f"   nvidia-ctk sees the node's {', '.join(bound)}"
        if bound
        else "   nvidia-ctk sees the host's /proc, /sys"
    )
    nvidia = generate(nvidia_command, os.path.join(scratch, "nvidia.json"))
    only: list[str] = []
    if nvidia.spec is None and node.preset.migs:
        print(f"   nvidia-ctk failed on the whole node ({nvidia.error})")
        only = [str(gpu.index) for gpu in node.preset.gpus if gpu.mig != "enabled"]
        print(f"   so both run on the full GPUs not in MIG mode only: --device-id {','.join(only)}")
        ids = [arg for index in only for arg in ("--device-id", index)]
        nvidia = generate([*nvidia_command, *ids], os.path.join(scratch, "nvidia.json"))
        cdictk_command += ids
    ours = generate(cdictk_command, os.path.join(scratch, "cdictk.json"))
    if nvidia.spec is None or ours.spec is None:
        for name, run in (("nvidia-ctk", nvidia), ("cdictk", ours)):
            if run.spec is None:
                print(f"   {name} failed: {run.error}")
        print()
        return f"{label}: not compared ({'nvidia-ctk' if nvidia.spec is None else 'cdictk'} failed)"
    print(
        f"   specs: nvidia-ctk cdiVersion {nvidia.spec.get('cdiVersion')}, {nvidia.warnings} warnings; "
        f"cdictk cdiVersion {ours.spec.get('cdiVersion')}, {ours.warnings} warnings"
    )
    names, common, devices = compare(normalise(nvidia.spec, node.root), normalise(ours.spec, node.root))
    for line in names.lines("   "):
        print(line)
    print("   common edits:" + (" the same" if common.empty() else ""))
    for line in common.lines("     "):
        print(line)
    # Devices with the same differences (a GPU's index and UUID names) are printed once.
    grouped: dict[tuple[str, ...], list[str]] = {}
    for name, difference in devices.items():
        grouped.setdefault(tuple(difference.lines("     ")), []).append(name)
    for lines, group in grouped.items():
        print(f"   device {', '.join(group)}:" + ("" if lines else " the same"))
        for line in lines:
            print(line)
    print()
    counts: dict[str, list[int]] = {}
    for difference in (names, common, *devices.values()):
        for index, side in enumerate((difference.nvidia_only, difference.cdictk_only)):
            for category, items in side.items():
                counts.setdefault(category, [0, 0])[index] += len(items)
    parts = [f"{category} {n}/{c}" for category, (n, c) in sorted(counts.items())]
    restricted = f", GPUs {','.join(only)} only: nvidia-ctk failed on the whole node" if only else ""
    return f"{label} [{compared(devices)}{restricted}]: " + (", ".join(parts) or "no differences")


def compared(devices: Mapping[str, object]) -> str:
    """How many full GPUs and MIG devices both specs have, by their UUID names."""
    gpus = sum(name.startswith("GPU-") for name in devices)
    migs = sum(name.startswith("MIG-") for name in devices)
    return f"full GPUs {gpus}, MIG devices {migs}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nvidia-ctk", metavar="PATH", help="NVIDIA's nvidia-ctk binary")
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS), help="repeatable; default all")
    parser.add_argument("--tree", action="store_true", help="also --driver-root at the driver's own tree")
    parser.add_argument(
        "--host-view",
        choices=("node", "host"),
        default="node",
        help="node: nvidia-ctk sees the node's /proc/driver and sysfs files (bound over the host's);\n"
        "host: the host's, as it reads them",
    )
    args = parser.parse_args()
    if not args.nvidia_ctk:
        print("no --nvidia-ctk: give the path of NVIDIA's nvidia-ctk to compare against", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench/compare_generate.py needs root: the fake nodes' device nodes are made with mknod")
        return 0
    nvidia_ctk = os.path.abspath(args.nvidia_ctk)
    # The cdictk this process imports (printed below), run as `python -m cdictk`. A console script, on
    # PATH or beside the interpreter, may belong to another checkout: a pyenv shim or an editable install
    # elsewhere runs that checkout's code.
    cdictk = [sys.executable, "-m", "cdictk"]
    version = subprocess.run([nvidia_ctk, "--version"], capture_output=True, text=True, check=False)
    print(f"nvidia-ctk: {nvidia_ctk} ({' '.join(version.stdout.split()[:8]) or version.stderr.strip()})")
    print(f"cdictk: {' '.join(cdictk)} ({os.path.dirname(cdictk_package.__file__)})")
    print("NVIDIA only / cdictk only: what one spec has that the other lacks; host paths as <root>/...\n")
    generators = Generators(cdictk, nvidia_ctk, args.host_view)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="cdictk-compare-") as scratch:
        cache = os.path.join(scratch, "cache")
        for name in args.preset or list(PRESETS):
            os.makedirs(os.path.join(scratch, name))
            node = build_node(os.path.join(scratch, name, "root"), name, cache)
            summaries.append(report(f"{name} (default roots)", node, generators, node.cli_args()))
            if args.tree:
                if node.tree == node.root and node.preset.layout.dev_root is None:
                    summaries.append(f"{name} (tree roots): the tree is the root, as above")
                else:
                    summaries.append(report(f"{name} (tree roots)", node, generators, node.tree_cli_args()))
    print("summary (differences NVIDIA only/cdictk only, by category):")
    for line in summaries:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
