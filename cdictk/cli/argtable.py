"""A command's options as a table: click builds its command from it, and a command line that plainly
fits it is read here without click.

click costs about 23 ms to import on a 2-core machine, more than NVIDIA's whole ``nvidia-ctk cdi
generate`` takes. :func:`parse` reads the usual spellings (``--name VALUE``, ``--name=VALUE``, ``-o
VALUE``, flags) and returns None for anything else: ``--help``, an unknown option, a bad choice or
number, a stray argument. The caller then hands the command line to click, which reads it with the
same table and says what is wrong, so both readers always agree on what is accepted.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing imports re: keep both off the fast path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    import click

# How an option takes values: one (the last given wins, as in click), a flag, or repeatable.
VALUE, FLAG, MANY = "value", "flag", "many"


class Opt:
    """One option: its spellings (long ones first), the keyword the command gets, and click's help.
    (A plain class, not a record: the spellings come first, as arguments, as click takes them.)"""

    __slots__ = ("choices", "default", "dest", "help", "kind", "metavar", "names", "number", "show_default")

    def __init__(
        self,
        *names: str,
        dest: str,
        kind: str = VALUE,
        default: object = None,
        choices: tuple[str, ...] = (),
        number: tuple[float, float] | None = None,
        metavar: str | None = None,
        show_default: bool = False,
        help: str = "",
    ) -> None:
        self.names = names
        self.dest = dest
        self.kind = kind
        self.default = default
        self.choices = choices  # the accepted values; () for any
        self.number = number  # (low, high): a float in that closed range
        self.metavar = metavar
        self.show_default = show_default
        self.help = help


def defaults(table: Sequence[Opt]) -> dict[str, object]:
    """Every keyword as click passes it when its option is not given."""
    return {
        opt.dest: () if opt.kind == MANY else (False if opt.kind == FLAG else opt.default) for opt in table
    }


def parse(table: Sequence[Opt], argv: Sequence[str]) -> dict[str, object] | None:
    """The keywords for ``argv``, or None when click must read it (help, anything odd or wrong)."""
    by_name = {name: opt for opt in table for name in opt.names}
    values = defaults(table)
    many: dict[str, list[str]] = {}
    args = iter(argv)
    for arg in args:
        name, eq, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        opt = by_name.get(name)
        if opt is None:
            return None
        if opt.kind == FLAG:
            if eq:
                return None
            values[opt.dest] = True
            continue
        value = attached if eq else next(args, None)
        if value is None:
            return None
        checked = _checked(opt, value)
        if checked is None:
            return None
        if opt.kind == MANY:
            many.setdefault(opt.dest, []).append(value)
        else:
            values[opt.dest] = checked
    for dest, given in many.items():
        values[dest] = tuple(given)
    return values


def _checked(opt: Opt, value: str) -> object:
    if opt.choices and value not in opt.choices:
        return None
    if opt.number is None:
        return value
    try:
        number = float(value)
    except ValueError:
        return None
    low, high = opt.number
    return number if low <= number <= high else None


def click_command(
    name: str, table: Sequence[Opt], callback: Callable[..., object], doc: str | None
) -> click.Command:
    """The click command for ``table``, options in table order, ``callback`` getting the keywords."""
    import click  # noqa: PLC0415

    params: list[click.Parameter] = []
    for opt in table:
        kind: click.ParamType[Any] | None = None
        if opt.choices:
            kind = click.Choice(opt.choices)
        elif opt.number is not None:
            kind = click.FloatRange(*opt.number)
        params.append(
            click.Option(
                [*opt.names, opt.dest],
                type=kind,
                multiple=opt.kind == MANY,
                is_flag=opt.kind == FLAG,
                default=False if opt.kind == FLAG else opt.default,
                show_default=opt.show_default,
                metavar=opt.metavar,
                help=opt.help,
            )
        )
    return click.Command(name, callback=callback, params=params, help=doc)
