from __future__ import annotations

import random
import re

import pytest

from cdictk.sorting import natural_key

_RUNS = re.compile(r"(\d+)")  # what natural_key was until re's import cost dropped it


def regex_natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _RUNS.split(name) if part)


def test_names_sort_in_natural_order() -> None:
    names = ["gpu10", "gpu2", "so.1.10", "so.1.9", "", "10", "9a", "a"]
    assert sorted(names, key=natural_key) == ["", "9a", "10", "a", "gpu2", "gpu10", "so.1.9", "so.1.10"]


def test_names_are_cut_as_the_regex_they_replaced_cut_them() -> None:
    """The same runs as the regex's; where its key raised (a run like "²": isdigit, yet no decimal
    digit, went to int()), natural_key makes that run text."""
    # Characters one by one (Unicode digits, whitespace, separators), then longer runs.
    pieces = [*"1٣²①é-.: \n\u2003", "gpu", "10", "007", "", "9" * 40, "x" * 30]
    chance = random.Random(19)  # noqa: S311 - names to try, repeatable
    raised = 0
    for _ in range(30000):
        name = "".join(chance.choice(pieces) for _ in range(chance.randint(0, 8)))
        runs = [part for part in _RUNS.split(name) if part]
        key = natural_key(name)
        assert key == tuple((0, int(part)) if part.isdecimal() else (1, part) for part in runs), name
        try:
            assert key == regex_natural_key(name), name
        except ValueError:
            raised += 1
    assert raised > 1000  # runs like "²" and "①" were tried


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("²", ((1, "²"),)),
        ("gpu²1", ((1, "gpu²"), (0, 1))),
        ("1²", ((0, 1), (1, "²"))),
        ("gpu٣", ((1, "gpu"), (0, 3))),
        ("", ()),
    ],
)
def test_only_decimal_runs_are_numbers(name: str, key: tuple[tuple[int, int | str], ...]) -> None:
    assert natural_key(name) == key
