"""The ``cdictk`` console script: ``cdictk hook ...`` goes straight to the hooks (and ``cdictk hook
prestart`` to the legacy prestart hook), without click, and so does a plain ``cdictk cdi generate``.

Hooks run on every container start; loading the whole command line (click, and what the other
commands import) would cost them tens of milliseconds for nothing. ``cdi generate`` reads a command
line that fits its option table itself (:mod:`cdictk.cli.argtable`) and leaves the rest (``--help``,
mistakes) to click.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing imports re: keep both off the fast paths
if TYPE_CHECKING:
    from collections.abc import Sequence

# Commands read without click: their words -> the module whose fast_main(args) returns an exit status,
# or None to hand the command line to click.
FAST_COMMANDS: dict[tuple[str, ...], str] = {("cdi", "generate"): "cdictk.cli.generate"}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"]:
        from cdictk.cli.hook import run_hook  # noqa: PLC0415

        return run_hook(args[1:])
    fast = FAST_COMMANDS.get((*args[:2],))
    if fast is not None:
        import importlib  # noqa: PLC0415 - loaded at start already: no cost

        status: int | None = importlib.import_module(fast).fast_main(args[2:])
        if status is not None:
            return status
    from cdictk.cli.main import main as cli_main  # noqa: PLC0415

    return cli_main(args)
