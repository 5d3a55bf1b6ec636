"""The strict YAML reader of specs and settings files: values typed as Go's readers type them; duplicate
keys, anchors, tags, complex keys and deep nesting refused with one line naming the field."""

import pytest

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.strictyaml import MAX_DEPTH, more_documents, parse_yaml
from cdictk.yamlscalar import Timestamp


def parse(text: str) -> object:
    return parse_yaml(text, "spec.yaml")


def error(text: str) -> str:
    with pytest.raises(CdictkError) as caught:
        parse_yaml(text, "spec.yaml")
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


@pytest.mark.parametrize("text", ["a: 1\n", "---\na: 1\n...\n", "a: [\n", "", '{"a": 1}'])
def test_one_document_or_a_broken_one_is_not_more(text: str) -> None:
    assert not more_documents(text)


def test_duplicate_key_names_the_field_and_line() -> None:
    text = "devices:\n- name: x\n  containerEdits:\n    env: [A=1]\n    env: [B=2]\n"
    assert error(text) == "spec.yaml: devices[0].containerEdits.env: duplicate key (line 5, column 5)"


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


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 20000 + "]" * 20000 + "\n",
        "a: " + "{b: " * 20000 + "c" + "}" * 20000 + "\n",
        "".join(f"{' ' * depth}b:\n" for depth in range(3000)),
    ],
)
def test_nesting_far_past_the_limit_is_one_line_not_a_recursion_error(text: str) -> None:
    # Ours past MAX_DEPTH; libyaml's own limit may stop a flow collection first.
    message = error(text)
    assert message.startswith("spec.yaml: ") and "nest" in message and "\n" not in message
