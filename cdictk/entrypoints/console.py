"""The ``cdictk`` console script: ``cdictk hook ...`` goes straight to the hooks (and ``cdictk hook
prestart`` to the legacy prestart hook), without click; every other command to click.

Hooks run on every container start; loading the whole command line (click, and what the other
commands import) would cost them tens of milliseconds for nothing.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing imports re: keep both off the hooks' path
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"]:
        return run_hook(args[1:])
    from cdictk.cli.main import main as cli_main  # noqa: PLC0415 - every command but `cdictk hook`

    return cli_main(args)


def run_hook(args: Sequence[str]) -> int:
    """``[--debug] [--quiet] NAME [OPTIONS]``: ``prestart`` goes to the legacy prestart hook, the shim's
    work on a created container; every other name (and a command line that names none) to the hook
    entry point, which reads the options before the name the same way."""
    from cdictk.startpath.helpers.errors import HookError  # noqa: PLC0415
    from cdictk.startpath.hooks.cmdline import HOOK_GLOBALS, parse  # noqa: PLC0415

    try:
        parsed = parse(args, HOOK_GLOBALS, operands=True)
    except HookError:
        parsed = None  # the entry point says what is wrong
    if parsed is not None and parsed.final is None and parsed.rest[:1] == ["prestart"]:
        from cdictk.entrypoints.slowpath import slow_path  # noqa: PLC0415
        from cdictk.startpath.prestart.main import main as prestart_main  # noqa: PLC0415

        argv = [*(["--debug"] if "debug" in parsed.flags else []), *parsed.rest]
        return prestart_main(argv, misses=slow_path())
    from cdictk.startpath.hooks.entry import main as hook_main  # noqa: PLC0415

    return hook_main(list(args))
