"""``cdictk hook ...``: the spec's hook steps, or the legacy prestart hook, without click.

Both run on container starts; the command line's other imports would cost them tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.cmdline import HOOK_GLOBALS, parse


def run_hook(args: Sequence[str]) -> int:
    """``[--debug] [--quiet] NAME [OPTIONS]``: ``prestart`` goes to the legacy prestart hook, the shim's
    work on a created container; every other name (and a command line that names none) to the hook
    entry point, which reads the options before the name the same way."""
    try:
        parsed = parse(args, HOOK_GLOBALS, operands=True)
    except HookError:
        parsed = None  # the entry point says what is wrong
    if parsed is not None and parsed.final is None and parsed.rest[:1] == ["prestart"]:
        from cdictk.startpath.prestart.main import main as prestart_main  # noqa: PLC0415

        return prestart_main([*(["--debug"] if "debug" in parsed.flags else []), *parsed.rest])
    from cdictk.startpath.hooks.entry import main as hook_main  # noqa: PLC0415

    return hook_main(list(args))
