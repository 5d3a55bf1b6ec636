from __future__ import annotations

import pytest

from cdictk.sorting import natural_key


def test_names_sort_in_natural_order() -> None:
    names = ["gpu10", "gpu2", "so.1.10", "so.1.9", "", "10", "9a", "a"]
    assert sorted(names, key=natural_key) == ["", "9a", "10", "a", "gpu2", "gpu10", "so.1.9", "so.1.10"]


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
