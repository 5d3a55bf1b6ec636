import pytest

from cdictk.cdi.parse import parse_document
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.strictyaml import MAX_DEPTH


def parse(text: str) -> object:
    return parse_document(text.encode(), "spec.yaml")


def error(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    with pytest.raises(CdictkError) as caught:
        parse_document(data, "spec.yaml")
    return str(caught.value)


def test_yaml_goes_through_the_strict_yaml_reader() -> None:
    assert parse("a: [x, yes, 0660]\n") == {"a": ["x", True, 432]}
    assert error("a: 1\na: 2\n") == "spec.yaml: a: duplicate key (line 2, column 1)"
    assert f"nested deeper than {MAX_DEPTH} levels" in error(
        "a:\n" + "".join(f"{' ' * n} b:\n" for n in range(99))
    )


def test_json_followed_by_another_document_is_read_as_yaml() -> None:
    assert parse('{"a": 1}\n---\n{') == {"a": 1}


def test_duplicate_key_in_json_names_the_field() -> None:
    assert error('{"a": {"b": [1, {"c": 1, "c": 2}]}}').startswith("spec.yaml: a.b[1].c: duplicate key")


def test_deep_json_is_refused() -> None:
    assert "spec.yaml" in error("[" * 100000 + "]" * 100000)


def test_json_and_flow_yaml() -> None:
    assert parse_document(b'{"a": [1, "x"]}', "s.json") == {"a": [1, "x"]}
    # JSON is YAML: a .json file in flow-style YAML loads, as it does for the Go library.
    assert parse_document(b"{a: b, c: 0660}", "s.json") == {"a": "b", "c": 432}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b'{"a": [1, "x"],}', "invalid JSON: trailing comma (line 1, column 15)"),
        (b'{"a": [1, "x",\n]}', "invalid JSON: trailing comma (line 1, column 14)"),
        (b"{a: b}", "invalid JSON: Expecting property name enclosed in double quotes (line 1, column 2)"),
        (b"a: b\n", "invalid JSON: Expecting value (line 1, column 1)"),
    ],
)
def test_json_only_refuses_yaml_that_is_not_json(text: bytes, reason: str) -> None:
    assert parse_document(text, "s.json") == parse_document(text, "s.yaml")
    with pytest.raises(CdictkError) as caught:
        parse_document(text, "s.json", json_only=True)
    assert str(caught.value) == f"s.json: {reason}"


def test_json_only_still_names_the_field_of_a_duplicate_key() -> None:
    with pytest.raises(CdictkError) as caught:
        parse_document(b'{"a": {"b": 1, "b": 2}}', "s.json", json_only=True)
    assert str(caught.value) == "s.json: a.b: duplicate key (line 1, column 16)"
    assert parse_document(b'{"a": [1, "x"]}', "s.json", json_only=True) == {"a": [1, "x"]}


def test_invalid_json_reports_the_json_error() -> None:
    with pytest.raises(CdictkError, match=r"s\.json: invalid"):
        parse_document(b'{"a": [1, }', "s.json")


def test_byte_order_mark_and_bad_utf8() -> None:
    assert parse_document("\ufeffa: 1\n".encode(), "s.yaml") == {"a": 1}
    assert "not valid UTF-8" in error(b"a: \xff\n")
