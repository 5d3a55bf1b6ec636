import itertools
import math
import random

import pytest
import yaml

from cdictk.cdi.yamlscalar import Timestamp, go_text, is_ambiguous, resolve_plain, retyped_by_pyyaml


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("", None),
        ("~", None),
        ("null", None),
        ("NULL", None),
        ("y", True),
        ("Yes", True),
        ("on", True),
        ("TRUE", True),
        ("n", False),
        ("NO", False),
        ("off", False),
        ("false", False),
        ("0", 0),
        ("42", 42),
        ("-7", -7),
        ("+7", 7),
        ("0660", 0o660),
        ("0x1F", 31),
        ("0o17", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("1.5", 1.5),
        ("1.0", 1.0),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("09", 9.0),
        (".inf", math.inf),
        ("-.Inf", -math.inf),
        ("2001-12-14", Timestamp("2001-12-14")),
        ("2001-12-14T21:59:43.10-05:00", Timestamp("2001-12-14T21:59:43.10-05:00")),
        ("nvidia.com/gpu", "nvidia.com/gpu"),
        ("gpu0", "gpu0"),
        ("1.2.3", "1.2.3"),
        ("0.5.0", "0.5.0"),
        ("+-1", "+-1"),
        ("-", "-"),
        ("yesno", "yesno"),
    ],
)
def test_plain_scalars_are_typed_as_yaml_1_1(text: str, value: object) -> None:
    assert resolve_plain(text) == value
    assert type(resolve_plain(text)) is type(value)


def test_nan() -> None:
    value = resolve_plain(".nan")
    assert isinstance(value, float) and math.isnan(value)


@pytest.mark.parametrize(
    "text",
    ["y", "n", "yes", "on", "off", "0", "1.0", "0660", "~", "null", "2001-12-14", "1e3", "1:2", "7:30:15"],
)
def test_ambiguous_strings(text: str) -> None:
    assert is_ambiguous(text)


@pytest.mark.parametrize("text", ["gpu", "0.5.0", "/dev/nvidia0", "NVIDIA_VISIBLE_DEVICES=void", "all"])
def test_plain_strings(text: str) -> None:
    assert not is_ambiguous(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("x", "x"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (0o660, "432"),
        (-3, "-3"),
        (1.5, None),
        (None, None),
        (Timestamp("2001-12-14 21:59:43.10"), "2001-12-14 21:59:43.10"),
    ],
)
def test_go_text(value: object, text: str | None) -> None:
    assert go_text(value) == text


def pyyaml_retypes(text: str) -> bool:
    """PyYAML's own answer, as dump.py asks it: the resolvers listed for the first character."""
    resolvers = yaml.resolver.Resolver.yaml_implicit_resolvers
    return any(pattern.match(text) for _tag, pattern in resolvers.get(text[0], ()))


def resolver_probes() -> list[str]:
    printable = "".join(map(chr, range(0x20, 0x7F)))
    strings = ["".join(chars) for length in (1, 2) for chars in itertools.product(printable, repeat=length)]
    strings += ["".join(chars) for chars in itertools.product("019+-._:eEx~yn<=!*/", repeat=3)]
    strings += ["".join(chars) for chars in itertools.product("016+-._:eExbT Z", repeat=4)]
    tokens = ["0", "1", "5", "7", "9", "12", "59", "60", "2001", "-", "+", ".", "_", ":", "e", "E", "e+", "x"]
    tokens += [
        "0x",
        "0b",
        "0o",
        "T",
        "t",
        "Z",
        " ",
        "\t",
        "a",
        "F",
        "inf",
        "nan",
        "NaN",
        "~",
        "yes",
        "Off",
        "<<",
    ]
    rng = random.Random(19)  # noqa: S311 (a fixed seed: the same strings every run)
    strings += ["".join(rng.choices(tokens, k=rng.randint(1, 10))) for _ in range(30000)]
    strings += timestamp_probes()
    # PyYAML's $ also matches before a final line break; non-ASCII digits are no digits to it.
    strings += [text + "\n" for text in strings[:20000]] + [
        "1\n\n",
        "yes\n\n",
        "\n",
        "\u0661",
        "1\u0661",
        "\uff11",
    ]
    return list(dict.fromkeys(strings))


def timestamp_probes() -> list[str]:
    """Dates and times, right and nearly right in each part."""
    dates = [
        f"{y}-{m}-{d}"
        for y in ("2001", "201", "20011")
        for m in ("1", "12", "123", "")
        for d in ("4", "14", "144")
    ]
    times = [
        "",
        "T21:59:43",
        "t1:59:43",
        " 21:59:43",
        "  2:59:43",
        "\t21:59:43",
        "T21:5:43",
        "T21:59:4",
        "T21:59",
    ]
    fractions = ["", ".", ".10", ".1x"]
    zones = ["", "Z", " Z", "\tZ", "-5", "+05:00", " -05:30", "+5:0", "-123", "z"]
    return [
        date + time + fraction + zone
        for date in dates
        for time in times
        for fraction in fractions
        for zone in zones
    ]


def test_retyped_by_pyyaml_is_pyyamls_resolver() -> None:
    wrong = [text for text in resolver_probes() if retyped_by_pyyaml(text) != pyyaml_retypes(text)]
    assert wrong == []


@pytest.mark.parametrize("text", ["0x_", "-0b_", "1.5e+3", "<<", "=", "!", "&", "*", "1:20", "~", "yes"])
def test_pyyaml_retypes(text: str) -> None:
    assert retyped_by_pyyaml(text)
