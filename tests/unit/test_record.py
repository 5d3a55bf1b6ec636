"""@record behaves as the dataclasses it replaced, for what cdictk does with them."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from cdictk.record import FrozenError, asdict, field, fields, record, replace


@record(frozen=True)
class Point:
    x: int
    label: str = "p"
    tags: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return f"{self.label}{self.x}"


@record
class Bag:
    point: Point
    items: list[Point] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)


@record(frozen=True, eq=False)
class Handle:
    name: str


def test_construction_by_position_or_keyword_with_defaults() -> None:
    assert Point(1) == Point(x=1, label="p", tags=())
    assert Point(1, "q").text == "q1"
    assert repr(Point(2, tags=("a",))) == "Point(x=2, label='p', tags=('a',))"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (Point, "missing required argument: 'x'"),
        (lambda: Point(1, "a", (), 4), "takes 3 positional arguments but 4 were given"),  # type: ignore[call-arg]
        (lambda: Point(1, x=2), "got multiple values for argument 'x'"),  # type: ignore[misc]
        (lambda: Point(1, y=2), "got an unexpected keyword argument 'y'"),  # type: ignore[call-arg]
    ],
)
def test_a_wrong_call_is_a_type_error(make: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()  # type: ignore[operator]


def test_a_default_factory_makes_a_new_value_per_instance() -> None:
    first, second = Bag(Point(1)), Bag(Point(1))
    first.items.append(Point(2))
    assert second.items == [] and first != second


def test_frozen_records_are_read_only_and_hash_by_value() -> None:
    point = Point(1)
    with pytest.raises(FrozenError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenError):
        del point.label
    assert hash(point) == hash(Point(1)) and {point: 1}[Point(1)] == 1
    with pytest.raises(TypeError):
        hash(Bag(point))  # mutable records are unhashable, as mutable dataclasses with eq are


def test_eq_false_compares_by_identity() -> None:
    handle = Handle("a")
    same = handle
    assert handle != Handle("a") and handle == same and hash(handle) != hash(Handle("a"))


def test_slots_only() -> None:
    assert Point.__slots__ == ("x", "label", "tags")  # type: ignore[attr-defined]
    assert not hasattr(Point(1), "__dict__")
    with pytest.raises(AttributeError):
        Bag(Point(1)).other = 1  # type: ignore[attr-defined]


def test_replace_asdict_fields_and_copies() -> None:
    bag = Bag(Point(1), [Point(2, tags=("t",))], {"a": 1})
    assert replace(Point(1), label="q") == Point(1, "q")
    with pytest.raises(TypeError, match="no field 'nope'"):
        replace(Point(1), nope=1)
    assert asdict(bag) == {
        "point": {"x": 1, "label": "p", "tags": ()},
        "items": [{"x": 2, "label": "p", "tags": ("t",)}],
        "names": {"a": 1},
    }
    assert fields(Bag) == ("point", "items", "names")
    deep = copy.deepcopy(bag)
    assert deep == bag and deep.items is not bag.items
    assert copy.copy(Point(3)) == Point(3)


def test_a_field_without_a_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="without a default"):

        @record
        class Wrong:
            a: int = 0
            b: int  # type: ignore[misc]


def test_inherited_fields_come_first() -> None:
    @record(frozen=True)
    class Labelled(Point):
        colour: str = "red"

    assert fields(Labelled) == ("x", "label", "tags", "colour")
    assert Labelled(1, colour="blue") == Labelled(x=1, label="p", tags=(), colour="blue")


def test_importing_it_costs_no_dataclasses_typing_or_re() -> None:
    code = "import sys, cdictk.record; print(sorted({'dataclasses', 'typing', 're'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "[]", done.stderr
