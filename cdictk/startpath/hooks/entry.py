"""``cdictk hook NAME [OPTIONS]``: read the OCI state, find the rootfs, run one hook.

The command line is nvidia-cdi-hook's, so specs written for either tool work with both. A hook name
this version does not know warns and exits 0: a spec written by a newer cdictk must never stop a
container from starting. Any failure is one line on stderr and exit status 1, never a traceback, and
the container does not start.

Options are read by :mod:`cdictk.startpath.hooks.cmdline`, the hooks' one parser: argparse (and typing,
dataclasses, json, re, which it and the obvious alternatives pull in) would add tens of milliseconds
to every container start.
"""

from __future__ import annotations

import os
import sys

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.cmdline import HOOK_GLOBALS, parse
from cdictk.startpath.hooks.steps import BY_NAME, PROG, Options, Step

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import BinaryIO


PRESTART_SUMMARY = "the legacy prestart hook: give a created container the GPUs its config.json asks for"


def usage() -> str:
    lines = [f"usage: {PROG} [--debug] [--quiet] HOOK [OPTIONS]  (OCI state JSON on stdin)", "", "hooks:"]
    lines += [f"  {name:34} {step.summary}" for name, step in BY_NAME.items()]
    lines.append(f"  {'prestart':34} {PRESTART_SUMMARY}")
    return "\n".join(lines)


def main(argv: Sequence[str], stdin: BinaryIO | None = None) -> int:
    # runc runs createContainer hooks with the rootfs as working directory: never resolve anything there.
    os.chdir("/")
    os.umask(0o022)
    try:
        parsed = parse(argv, HOOK_GLOBALS, operands=True)
    except HookError as exc:
        # Not a hook name: ignoring it like an unknown hook would start the container unprepared.
        print(f"{PROG}: before the hook name: {exc}", file=sys.stderr)
        return 2
    args = parsed.rest
    if parsed.final or args[:1] == ["help"]:
        print(usage())
        return 0
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    debug, quiet = "debug" in parsed.flags, "quiet" in parsed.flags
    name, args = args[0], args[1:]
    if name == "noop":  # what benchmarks and tests time: the entry point alone
        return 0
    if name == "prestart":
        # The legacy hook is the runtime shim's work, not a step on a rootfs: `cdictk hook prestart`
        # reaches it from the command line. Never ignored like an unknown hook: that would start a
        # --gpus container without its GPUs.
        print(
            f"{PROG}: prestart is run as `cdictk hook prestart` or the cdictk-prestart launcher",
            file=sys.stderr,
        )
        return 2
    step = BY_NAME.get(name)
    if step is None:
        from cdictk.startpath.helpers.ocistate import drain_state  # noqa: PLC0415

        drain_state(stdin if stdin is not None else sys.stdin.buffer)
        if not quiet:
            print(f"{PROG}: unsupported hook {name!r}; ignored", file=sys.stderr)
        return 0
    try:
        options = step.parse(args)
        if options is None:
            print(step.usage())
            return 0
        options.debug = debug
        run_on_container(step, options, stdin if stdin is not None else sys.stdin.buffer)
    except HookError as exc:
        message = str(exc)
        # The steps name themselves for the batched hook; a hook run on its own is named already.
        message = message.removeprefix(f"{name}: ")
        print(f"{PROG} {name}: {message}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG} {name}: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"{PROG} {name}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_on_container(step: Step, options: Options, stdin: BinaryIO) -> None:
    """Check the step's arguments, then run it on the rootfs of the container the OCI state names."""
    from cdictk.startpath.helpers.ocistate import container_state, read_state  # noqa: PLC0415
    from cdictk.startpath.helpers.rootfs import open_rootfs  # noqa: PLC0415

    prepared = step.prepare(options)
    try:
        container = container_state(read_state(stdin))
        with open_rootfs(container.rootfs) as rootfs:
            options.log(f"container {container.id or '?'}: rootfs {container.rootfs}")
            prepared.run(rootfs)
    finally:
        prepared.close()
