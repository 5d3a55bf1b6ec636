"""``python -m cdictk.noderuntime build | launcher``: build the node runtime (in the image it comes
from) and its launcher (here, with gcc)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cdictk.noderuntime.assemble import BuildError
from cdictk.noderuntime.assemble import build as build_runtime
from cdictk.noderuntime.launcher import LauncherError, compile_launcher

PROG = "python -m cdictk.noderuntime"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build cdictk's node runtime: a relocatable copy of this Python, its libraries and "
        "loader, with cdictk, that GPU nodes run cdictk's hooks and runtime with (no Python, glibc or "
        "shell of the node's is used).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build = commands.add_parser(
        "build",
        help="build the runtime from this Python (run it in the image, e.g. chroot ROOT python3 -m ...)",
        description="Build the runtime from the Python running this command and the cdictk installed "
        "for it, into DIR (made beside it, renamed in when complete). Prints DIR, the runtime's ID and "
        "its size. The same inputs give the same bytes and ID.",
    )
    build.add_argument(
        "--output", required=True, metavar="DIR", help="where the runtime goes; must not exist"
    )
    build.add_argument(
        "--launcher",
        required=True,
        metavar="FILE",
        help=f"the static launcher ({PROG} launcher builds it), linked under every name in bin/",
    )
    launcher = commands.add_parser(
        "launcher",
        help="compile the static launcher (gcc -static -Os)",
        description="Compile the runtime's launcher from its C source with gcc -static -Os into FILE.",
    )
    launcher.add_argument("--output", required=True, metavar="FILE", help="the program to write")
    launcher.add_argument("--cc", default="gcc", metavar="CC", help="the C compiler (default gcc)")
    args = parser.parse_args(argv)
    if args.command == "launcher":
        try:
            print(compile_launcher(args.output, args.cc))
        except LauncherError as exc:
            print(f"{PROG} launcher: error: {exc}", file=sys.stderr)
            return 1
        return 0

    try:
        built = build_runtime(args.output, args.launcher)
    except BuildError as exc:
        print(f"{PROG} build: error: {exc}", file=sys.stderr)
        return 1
    print(f"{built.path} {built.runtime_id} {built.size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
