import math

import pytest

from cdictk.yamlscalar import Timestamp, go_text, is_ambiguous, resolve_plain


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
