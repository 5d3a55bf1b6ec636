"""Reading a TOML config, and the line edits made to one that tomlkit cannot read."""

from __future__ import annotations

import pytest

from cdictk.configure import tomledit
from cdictk.configure.tomledit import edit_top_level
from cdictk.startpath.helpers.errors import CdictkError


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # The first problem is the vertical tab on line 1, not the key given twice on line 4.
        ('a = 1\x0b\n[t]\nk = "x"\nk = "y"\n', "f.toml:1:6: invalid TOML: "),
        ('[t]\nk = "x"\nk = "y"\n', 'f.toml:3:8: invalid TOML: duplicate key "k"'),
        ("[t]\n[t]\n", 'f.toml:2:3: invalid TOML: duplicate key "t"'),
        ("x = [\n", "f.toml:2:1: invalid TOML: Invalid value"),  # the end: still a place
        ("a = " + "9" * 5000 + "\n", "f.toml:1:5005: invalid TOML: "),
    ],
)
def test_an_invalid_file_is_one_line_with_the_place_of_its_first_problem(text: str, message: str) -> None:
    with pytest.raises(CdictkError) as caught:
        tomledit.read(text, "f.toml")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    if "duplicate" not in message:
        assert "duplicate" not in str(caught.value)


def test_top_level_values_are_added_after_the_last_one_before_the_comments_of_the_first_table() -> None:
    text = "# top\nversion = 2\n\n# the first table\n[a]\nk = 1\n"
    new = {"version": 2, "imports": ["/d.toml"], "a": {"k": 1}}
    assert edit_top_level(text, {"version": 2, "a": {"k": 1}}, new) == (
        '# top\nversion = 2\nimports = ["/d.toml"]\n\n# the first table\n[a]\nk = 1\n'
    )


def test_a_value_on_one_line_is_replaced_or_deleted_in_place_keeping_its_indent_and_crlf() -> None:
    text = 'version = 2\r\n  imports = ["/a.toml"]\r\n[a]\r\nk = 1'
    old = {"version": 2, "imports": ["/a.toml"], "a": {"k": 1}}
    more = edit_top_level(text, old, {**old, "imports": ["/a.toml", "/d.toml"]})
    assert more == 'version = 2\r\n  imports = ["/a.toml", "/d.toml"]\r\n[a]\r\nk = 1\r\n'
    assert edit_top_level(text, old, {"version": 2, "a": {"k": 1}}) == "version = 2\r\n[a]\r\nk = 1\r\n"


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        # A table changes: that needs a real edit.
        ("[a]\nk = 1\n", {"a": {"k": 1}}, {"a": {"k": 2}}),
        # A value written over several lines is not edited line by line.
        ('imports = [\n  "/a.toml",\n]\n', {"imports": ["/a.toml"]}, {"imports": ["/a.toml", "/d.toml"]}),
    ],
)
def test_anything_else_is_left_to_the_caller_to_refuse(
    text: str, old: dict[str, object], new: dict[str, object]
) -> None:
    assert edit_top_level(text, old, new) is None


def test_a_line_starting_with_a_bracket_inside_a_value_is_not_taken_for_the_first_table() -> None:
    text = "nested = [\n[1], [2]]\n[a]\n"
    old = {"nested": [[1], [2]], "a": {}}
    assert (
        edit_top_level(text, old, {"nested": [[1], [2]], "v": 3, "a": {}})
        == "nested = [\n[1], [2]]\nv = 3\n[a]\n"
    )
