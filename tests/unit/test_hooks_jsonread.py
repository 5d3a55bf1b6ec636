"""jsonread: the hooks' strict JSON, on CPython's C scanner without importing json."""

from __future__ import annotations

import pytest

from cdictk.hooks.hookerror import HookError
from cdictk.hooks.jsonread import loads


def test_values_parse_as_json_does() -> None:
    text = b' {"a": [1, -2.5, "x\\u00e9", true, false, null], "b": {"c": 12345678901234567890}} \n'
    assert loads(text, "state") == {
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
        loads(data, "OCI state on stdin")
    assert str(info.value).startswith("OCI state on stdin: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)
