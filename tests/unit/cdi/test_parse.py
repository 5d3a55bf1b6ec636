import pytest

from cdictk.cdi.parse import MAX_DEPTH, more_documents, parse_document
from cdictk.cdi.yamlscalar import Timestamp
from cdictk.errors import CdictkError


def parse(text: str) -> object:
    return parse_document(text.encode(), "spec.yaml")


def error(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    with pytest.raises(CdictkError) as caught:
        parse_document(data, "spec.yaml")
    return str(caught.value)


def test_yaml_values() -> None:
    assert parse("a: [x, 'y', yes, 0660, 1.5, ~, 2001-12-14, !!str 0]\n") == {
        "a": ["x", "y", True, 432, 1.5, None, Timestamp("2001-12-14"), "0"]
    }


def test_quoted_scalars_stay_strings() -> None:
    assert parse("a: ['0', \"yes\", 'null']\n") == {"a": ["0", "yes", "null"]}


def test_empty_document_is_none() -> None:
    assert parse("") is None
    assert parse("# only a comment\n") is None


@pytest.mark.parametrize(
    "rest",
    ["---\nb: 2\n", "---\nfoo: [\n", "...\n%%%%\n", "---\n", "---\n- [}\n"],
)
def test_only_the_first_document_is_read_and_the_rest_not_parsed(rest: str) -> None:
    # The Go library's YAML reader stops there too: what follows may even be broken.
    assert parse("a: 1\n" + rest) == {"a": 1}
    assert more_documents("a: 1\n" + rest)


def test_an_empty_first_document_is_no_document() -> None:
    assert parse("---\n---\na: 1\n") is None


def test_json_followed_by_another_document_is_read_as_yaml() -> None:
    assert parse('{"a": 1}\n---\n{') == {"a": 1}


@pytest.mark.parametrize("text", ["a: 1\n", "---\na: 1\n...\n", "a: [\n", "", '{"a": 1}'])
def test_one_document_or_a_broken_one_is_not_more(text: str) -> None:
    assert not more_documents(text)


def test_duplicate_key_names_the_field_and_line() -> None:
    text = "devices:\n- name: x\n  containerEdits:\n    env: [A=1]\n    env: [B=2]\n"
    assert error(text) == "spec.yaml: devices[0].containerEdits.env: duplicate key (line 5, column 5)"


def test_duplicate_key_in_json_names_the_field() -> None:
    assert error('{"a": {"b": [1, {"c": 1, "c": 2}]}}').startswith("spec.yaml: a.b[1].c: duplicate key")


def test_duplicate_after_key_coercion() -> None:
    assert "duplicate key" in error("1: a\n'1': b\n")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: &x 1\nb: 2\n", "YAML anchor &x is not allowed"),
        ("a: &x 1\nb: *x\n", "YAML anchor &x is not allowed"),
        ("a: *x\n", "YAML alias *x is not allowed"),
        ("a: !!python/object:os.system x\n", "explicit YAML tag"),
        ("a: !!map {}\n", "explicit YAML tag"),
        ("? [a]\n: b\n", "a mapping key must be a scalar"),
        ("1.5: a\n", "mapping key 1.5 must be a string"),
        ("a: [\n", "invalid YAML"),
    ],
)
def test_refused_yaml(text: str, reason: str) -> None:
    assert reason in error(text)


def test_billion_laughs_is_refused_at_the_first_anchor() -> None:
    text = "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\n"
    assert error(text) == "spec.yaml: a: YAML anchor &a is not allowed (line 1, column 4)"


def test_deep_nesting_is_refused() -> None:
    text = "a: " + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "\n"
    assert f"nested deeper than {MAX_DEPTH} levels" in error(text)


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
