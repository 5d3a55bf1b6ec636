"""The ``cdictk`` console script: ``cdictk hook ...`` goes straight to the hooks (and ``cdictk hook
prestart`` to the legacy prestart hook), without click.

Hooks run on every container start; loading the whole command line (click, and what the other
commands import) would cost them tens of milliseconds for nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

HOOK_FLAGS = ("--debug", "--quiet", "-d", "-q")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"]:
        flags = []
        rest = args[1:]
        while rest and rest[0] in HOOK_FLAGS:
            flags.append(rest.pop(0))
        if rest[:1] == ["prestart"]:  # the legacy hook: the runtime shim's work on a created container
            from cdictk.runtime.prestart.main import main as prestart_main  # noqa: PLC0415

            debug = any(flag in ("--debug", "-d") for flag in flags)
            return prestart_main([*(["--debug"] if debug else []), *rest])
        from cdictk.hooks.entry import main as hook_main  # noqa: PLC0415

        return hook_main(args[1:])
    from cdictk.cli.main import main as cli_main  # noqa: PLC0415

    return cli_main(args)
