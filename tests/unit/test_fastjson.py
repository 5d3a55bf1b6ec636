"""fastjson's writer: compact JSON from CPython's C encoder, read back the same by its strict reader."""

from __future__ import annotations

import json

import pytest

from cdictk import fastjson


def test_dumps_is_compact_and_reads_back() -> None:
    value = {"b": [1, 2.5, True, None, 'é"\\\n'], "a": {"nested": []}, "z": -0.0}
    data = fastjson.dumps(value)
    assert data == json.dumps(value, separators=(",", ":")).encode()
    assert fastjson.loads(data) == value
    assert list(fastjson.loads(data)) == ["b", "a", "z"]  # the order is kept


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"a": object()}, {1j: 1}])
def test_dumps_refuses_what_is_not_json(bad: object) -> None:
    with pytest.raises(ValueError):
        fastjson.dumps(bad)


def test_dumps_refuses_a_container_inside_itself() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        fastjson.dumps(loop)


def test_errors_are_one_short_reason() -> None:
    for data, reason in (
        (b'{"a": 1, "a": 2}', 'duplicate key "a"'),
        (b"[1e999]", "invalid JSON: 1e999 is out of range"),
        (b"\xff", "invalid JSON: not UTF-8"),
        (b"[1,]", "invalid JSON: trailing comma (line 1, column 3)"),
        (b'{\n "a": 1,\n}', "invalid JSON: trailing comma (line 2, column 8)"),
        (b"[1,,]", "invalid JSON: Expecting value (line 1, column 4)"),
        (b"[,]", "invalid JSON: Expecting value (line 1, column 2)"),
    ):
        with pytest.raises(fastjson.JsonError) as caught:
            fastjson.loads(data)
        assert str(caught.value) == reason


def test_a_lone_surrogate_read_is_written_back_the_same() -> None:
    data = b'{"a":"\\ud800x\\u00e9"}'
    assert fastjson.dumps(fastjson.loads(data)) == data
