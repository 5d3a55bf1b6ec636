"""strictjson: the one JSON reader and writer, on CPython's C scanner and encoder without importing
json; its errors as CdictkError (files) or HookError (a hook's input)."""

from __future__ import annotations

import json

import pytest

from cdictk.startpath.helpers import strictjson
from cdictk.startpath.helpers.errors import CdictkError, HookError
from cdictk.startpath.helpers.strictjson import loads_for_hook


def test_loads() -> None:
    assert strictjson.loads('{"a": [1, 2.5, "x", null, true]}', "f") == {"a": [1, 2.5, "x", None, True]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', 'f: duplicate key "a"'),
        ('{"a": NaN}', "f: invalid JSON: NaN is not valid JSON"),
        ('{"a": Infinity}', "f: invalid JSON: Infinity is not valid JSON"),
        ('{"a": }', "f: invalid JSON: Expecting value (line 1, column 7)"),
        ('{"a": [1, 2, ],\n}', "f: invalid JSON: trailing comma (line 1, column 12)"),
        ("[" * 100000, "f: invalid JSON: nested too deeply"),
        (b"\xff", "f: invalid JSON"),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(CdictkError) as caught:
        strictjson.loads(text, "f")
    assert str(caught.value).startswith(message)


def test_dumps_is_compact_and_reads_back() -> None:
    value = {"b": [1, 2.5, True, None, 'é"\\\n'], "a": {"nested": []}, "z": -0.0}
    data = strictjson.dumps(value)
    assert data == json.dumps(value, separators=(",", ":")).encode()
    assert strictjson.parse(data) == value
    assert list(strictjson.parse(data)) == ["b", "a", "z"]  # the order is kept


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"a": object()}, {1j: 1}])
def test_dumps_refuses_what_is_not_json(bad: object) -> None:
    with pytest.raises(ValueError):
        strictjson.dumps(bad)


def test_dumps_refuses_a_container_inside_itself() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        strictjson.dumps(loop)


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
        with pytest.raises(strictjson.JsonError) as caught:
            strictjson.parse(data)
        assert str(caught.value) == reason


def test_a_lone_surrogate_read_is_written_back_the_same() -> None:
    data = b'{"a":"\\ud800x\\u00e9"}'
    assert strictjson.dumps(strictjson.parse(data)) == data


def test_values_parse_as_json_does() -> None:
    text = b' {"a": [1, -2.5, "x\\u00e9", true, false, null], "b": {"c": 12345678901234567890}} \n'
    assert loads_for_hook(text, "state") == {
        "a": [1, -2.5, "x\u00e9", True, False, None],
        "b": {"c": 12345678901234567890},
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": 1, "a": 2}', 'duplicate key "a"'),
        (b'{"a": {"b": 1, "b": 1}}', 'duplicate key "b"'),
        (b"[NaN]", "NaN is not valid JSON"),
        (b"[-Infinity]", "-Infinity is not valid JSON"),
        (b"[1e999]", "1e999 is out of range"),
        (b"{} {}", "Extra data"),
        (b'{"a": 1} x', "Extra data"),
        (b'{"a": ', "Expecting value"),
        (b"", "Expecting value"),
        (b"\xff", "not UTF-8"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    ],
)
def test_bad_json_is_one_error_naming_the_input(data: bytes, message: str) -> None:
    with pytest.raises(HookError) as info:
        loads_for_hook(data, "OCI state on stdin")
    assert str(info.value).startswith("OCI state on stdin: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)
