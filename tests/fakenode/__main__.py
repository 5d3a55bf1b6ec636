"""``python3 -m tests.fakenode build ROOT [--preset P]`` or ``demo [--preset P]`` (both need root)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from tests.fakenode.node import PRESETS, build_node


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.fakenode", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build a fake GPU node under ROOT and print generate's flags")
    build.add_argument("root")
    demo = commands.add_parser(
        "demo", help="build a node in a temp dir, generate, validate and print its spec"
    )
    for command in (build, demo):
        command.add_argument("--preset", choices=sorted(PRESETS), default="eight")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("fakenode: needs root (device nodes are made with mknod)", file=sys.stderr)
        return 1
    if args.command == "build":
        node = build_node(args.root, args.preset, os.path.join(args.root, ".stub-cache"))
        print(" ".join(node.cli_args()))
        return 0
    with tempfile.TemporaryDirectory(prefix="cdictk-demo-") as scratch:
        node = build_node(os.path.join(scratch, "node"), args.preset, os.path.join(scratch, "cache"))
        spec = os.path.join(scratch, "cdi", "nvidia.yaml")
        cdictk = [sys.executable, "-m", "cdictk"]
        print(f"$ cdictk cdi generate {' '.join(node.cli_args())} --output {spec}", flush=True)
        subprocess.run([*cdictk, "cdi", "generate", *node.cli_args(), "--output", spec], check=True)
        print(f"$ cdictk cdi validate {spec}", flush=True)
        subprocess.run([*cdictk, "cdi", "validate", spec], check=True)
        print(f"$ cdictk cdi list --spec-dir {os.path.dirname(spec)}", flush=True)
        subprocess.run([*cdictk, "cdi", "list", "--spec-dir", os.path.dirname(spec)], check=True)
        print(f"$ cat {spec}", flush=True)
        with open(spec, encoding="utf-8") as handle:
            sys.stdout.write(handle.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
