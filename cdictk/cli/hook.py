"""Start path: standard library only.

``cdictk hook ...``: the spec's hook steps, or the legacy prestart hook, without click.

Both run on container starts; the command line's other imports would cost them tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

FLAGS = ("--debug", "--quiet", "-d", "-q")


def run_hook(args: Sequence[str]) -> int:
    """``[--debug] [--quiet] NAME [OPTIONS]``: ``prestart`` goes to the legacy prestart hook, the shim's
    work on a created container; every other name to the hook entry point."""
    rest = list(args)
    flags = []
    while rest and rest[0] in FLAGS:
        flags.append(rest.pop(0))
    if rest[:1] == ["prestart"]:
        from cdictk.runtime.prestart.main import main as prestart_main  # noqa: PLC0415

        debug = any(flag in ("--debug", "-d") for flag in flags)
        return prestart_main([*(["--debug"] if debug else []), *rest])
    from cdictk.hooks.entry import main as hook_main  # noqa: PLC0415

    return hook_main(list(args))
