"""The hooks' one command-line parser: Go's flag syntax, for the entry point, the steps and the prestart hook."""

from __future__ import annotations

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.cmdline import HOOK_GLOBALS, Syntax, parse

STEP = Syntax(values=("mode",), lists=("path",), flags=("force",))
PRESTART = Syntax(values=("config",), flags=("debug",), final=("help", "version"), short={"d": "debug"})


def test_values_lists_and_flags_in_every_form() -> None:
    parsed = parse(["--mode", "-x", "-path=/a", "--path", "/b", "-force", "--mode=0644"], STEP)
    assert parsed.values == {"mode": "0644"}  # the last one given: the first took "-x" as its value
    assert parsed.lists == {"path": ["/a", "/b"]}
    assert parsed.flags == {"force"} and parsed.final is None and parsed.rest == []
    assert parse(["--mode="], STEP).values == {"mode": ""}


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        (["--force"], {"force"}),
        (["--force=true"], {"force"}),
        (["-force=1"], {"force"}),
        (["--force=false"], set()),
        (["--force", "--force=0"], set()),  # the last one given counts
        (["--force=0", "--force"], {"force"}),
    ],
)
def test_a_flag_is_alone_or_true_or_false(args: list[str], flags: set[str]) -> None:
    assert parse(args, STEP).flags == flags


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nope"], "unknown option --nope"),
        (["-nope=1"], "unknown option --nope"),
        (["---mode", "x"], "unknown option ---mode"),  # one dash or two, as Go's flag package
        (["--mode"], "--mode needs a value"),
        (["-path"], "--path needs a value"),
        (["--force=yes"], "--force takes no value, or true or false"),
        (["--force="], "--force takes no value, or true or false"),
        (["--help=1"], "--help takes no value"),
        (["stray"], "unexpected argument 'stray'"),
        (["--"], "unexpected argument '--'"),
        (["-"], "unexpected argument '-'"),
    ],
)
def test_every_problem_is_one_line(args: list[str], message: str) -> None:
    with pytest.raises(HookError) as caught:
        parse(args, STEP)
    assert str(caught.value) == message


def test_a_final_option_stops_the_parse() -> None:
    """--help answers even when what follows is wrong; what comes before it is read first."""
    for args in (["--help"], ["-h"], ["-help", "--nope", "stray"], ["--mode", "x", "--help"]):
        assert parse(args, STEP).final == "help", args
    with pytest.raises(HookError, match="unknown option --nope"):
        parse(["--nope", "--help"], STEP)
    assert parse(["--config", "a", "-version", "--bogus"], PRESTART).final == "version"


def test_with_operands_the_first_one_ends_the_options() -> None:
    parsed = parse(["-d", "--config=/c", "prestart", "--help", "x"], PRESTART, operands=True)
    assert (parsed.flags, parsed.values, parsed.final) == ({"debug"}, {"config": "/c"}, None)
    assert parsed.rest == ["prestart", "--help", "x"]
    with pytest.raises(HookError, match="unexpected argument '--'"):
        parse(["--", "prestart"], PRESTART, operands=True)


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        (["--debug", "--quiet", "name"], {"debug", "quiet"}),
        (["-d", "-q", "name"], {"debug", "quiet"}),
        # Also accepted since the prestart hook's parser became everyone's:
        (["-debug", "--q", "name"], {"debug", "quiet"}),
        (["--debug=true", "--quiet=false", "name"], {"debug"}),
    ],
)
def test_the_options_before_a_hook_name(args: list[str], flags: set[str]) -> None:
    parsed = parse(args, HOOK_GLOBALS, operands=True)
    assert (parsed.flags, parsed.rest) == (flags, ["name"])


def test_the_options_before_a_hook_name_take_no_other_option() -> None:
    for args in (["--verbose", "name"], ["--debug=maybe", "name"], ["-x"]):
        with pytest.raises(HookError):
            parse(args, HOOK_GLOBALS, operands=True)
