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
        from cdictk.startpath.hooks.command import run_hook  # noqa: PLC0415

        return run_hook(args[1:])
    from cdictk.cli.main import main as cli_main  # noqa: PLC0415

    return cli_main(args)
