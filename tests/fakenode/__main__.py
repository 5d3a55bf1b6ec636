"""``python3 -m tests.fakenode build ROOT [--preset P | --platform P]`` or ``demo [--preset P]`` (both
need root). ``--platform`` builds another mode's node (wsl, jetson, imex, nvswitch, gds, mofed, gdrcopy;
tests/fakenode/platforms.py)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

from tests.fakenode.node import PRESETS, build_node
from tests.fakenode.platforms import PLATFORMS, build_platform
from tests.fakenode.tools import MissingTool, node_tools

# What `python -m cdictk` imports, by import name: the demo runs it in this interpreter.
CDICTK_IMPORTS = ("cdictk", "click", "yaml", "jsonschema", "pynvml", "tomlkit")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.fakenode", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build a fake GPU node under ROOT and print generate's flags")
    build.add_argument("root")
    build.add_argument("--platform", choices=sorted(PLATFORMS), help="another generate mode's node")
    show = commands.add_parser(
        "demo", help="build a node in a temp dir, generate, validate and print its spec"
    )
    for command in (build, show):
        command.add_argument("--preset", choices=sorted(PRESETS), default="eight")
    args = parser.parse_args()
    try:
        node_tools()
    except MissingTool as lacking:
        print(f"fakenode: {lacking}", file=sys.stderr)
        return 1
    if args.command == "build" and args.platform:
        other = build_platform(args.root, args.platform, os.path.join(args.root, ".stub-cache"))
        print(" ".join([*other.cli_args(), "--mode", other.mode]))
        return 0
    if args.command == "build":
        node = build_node(args.root, args.preset, os.path.join(args.root, ".stub-cache"))
        print(" ".join(node.cli_args()))
        return 0
    missing = [module for module in CDICTK_IMPORTS if importlib.util.find_spec(module) is None]
    if missing:
        print(
            f"fakenode: cdictk's dependencies ({', '.join(missing)}) are not installed for {sys.executable}: "
            "run ./quickstart demo, which installs them in a virtual environment",
            file=sys.stderr,
        )
        return 1
    try:
        demo(args.preset)
    except subprocess.CalledProcessError as failed:
        # The program has printed its own error (cdictk's is one line); say which step it was.
        words = [str(word) for word in failed.cmd]
        step = " ".join(words[2:5]) if words[0] == sys.executable else os.path.basename(words[0])
        print(f"fakenode: {step} failed (exit {failed.returncode})", file=sys.stderr)
        return 1
    return 0


def demo(preset: str) -> None:
    """Build a node in a temp dir, then generate, validate, list and print its spec."""
    with tempfile.TemporaryDirectory(prefix="cdictk-demo-") as scratch:
        node = build_node(os.path.join(scratch, "node"), preset, os.path.join(scratch, "cache"))
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


if __name__ == "__main__":
    sys.exit(main())
