"""The one parser of the hooks' command lines: the options before a hook's name (``cdictk hook``), each
hook step's options, and the legacy prestart hook's (``nvidia-container-runtime-hook``).

The syntax is that of Go's flag package, which nvidia-cdi-hook and nvidia-container-runtime-hook
read, so a spec or a config written for NVIDIA's tools works with ours:

- ``-name`` or ``--name``; a value as ``--name VALUE`` or ``--name=VALUE`` (the next word is the value
  even when it starts with a dash); a value option given twice keeps the last, a list option keeps
  every value in order;
- a flag alone, or ``--flag=true|1|false|0`` (the last one given counts);
- a *final* option (``--help``, ``--version``) stops the parse there: what follows is not read;
- ``-`` and ``--`` are no options; where operands may come, the first word that is no option ends the
  options, and elsewhere it is an error.

Every problem is a :class:`~cdictk.startpath.helpers.errors.HookError` of one line; the caller turns it into
its exit status. argparse (and typing, re, which it imports) would cost every container start milliseconds.
"""

from __future__ import annotations

from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_TRUE = ("true", "1")
_FALSE = ("false", "0")


class Syntax:
    """The options one command line takes, by long name; ``short`` maps a short name to its long one."""

    __slots__ = ("final", "flags", "lists", "short", "values")

    def __init__(
        self,
        *,
        values: tuple[str, ...] = (),
        lists: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
        final: tuple[str, ...] = ("help",),
        short: dict[str, str] | None = None,
    ) -> None:
        self.values = values
        self.lists = lists
        self.flags = flags
        self.final = final
        self.short = {"h": "help"} if short is None else short


class Parsed:
    """What a command line gave: ``final`` is the final option that stopped the parse, if one did, and
    ``rest`` the words after the options (the first operand on)."""

    __slots__ = ("final", "flags", "lists", "rest", "values")

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.lists: dict[str, list[str]] = {}
        self.flags: set[str] = set()
        self.final: str | None = None
        self.rest: list[str] = []


# The options before a hook's name: the entry point reads them, and `cdictk hook` to pass --debug on
# to the legacy prestart hook.
HOOK_GLOBALS = Syntax(flags=("debug", "quiet"), short={"d": "debug", "q": "quiet", "h": "help"})


def parse(args: Sequence[str], syntax: Syntax, *, operands: bool = False) -> Parsed:
    """``args`` read as ``syntax`` says; with ``operands``, the options end at the first operand."""
    parsed = Parsed()
    items = list(args)
    while items:
        item = items[0]
        if not item.startswith("-") or item in ("-", "--"):
            if operands and item not in ("-", "--"):
                break
            raise HookError(f"unexpected argument {item!r}")
        del items[0]
        text, has_value, value = item.partition("=")
        name = text[2:] if text.startswith("--") else text[1:]
        name = syntax.short.get(name, name)
        if name in syntax.final:
            if has_value:
                raise HookError(f"--{name} takes no value")
            parsed.final = name
            break
        if name in syntax.flags:
            if not has_value or value in _TRUE:
                parsed.flags.add(name)
            elif value in _FALSE:
                parsed.flags.discard(name)
            else:
                raise HookError(f"--{name} takes no value, or true or false")
            continue
        if name not in syntax.values and name not in syntax.lists:
            raise HookError(f"unknown option --{name}")
        if not has_value:
            if not items:
                raise HookError(f"--{name} needs a value")
            value = items.pop(0)
        if name in syntax.lists:
            parsed.lists.setdefault(name, []).append(value)
        else:
            parsed.values[name] = value
    parsed.rest = items
    return parsed
