"""Reading one spec: the size cap, a strict parse and decode, and every rule's problem carried."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.cdi.load import InvalidSpecError, load_spec, load_spec_data, read_document
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.specdirs import MAX_SPEC_BYTES

VALID = """\
cdiVersion: 0.5.0
kind: vendor.com/gpu
devices:
- name: "0"
  containerEdits: {deviceNodes: [{path: /dev/null}]}
"""


def test_a_valid_spec_from_a_file_or_from_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(VALID)
    assert load_spec(str(path)).devices[0].name == "0"
    assert load_spec_data(VALID.encode(), "<stdin>").kind == "vendor.com/gpu"
    assert read_document(str(path))["kind"] == "vendor.com/gpu"


def test_json_only_refuses_yaml(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(VALID)
    with pytest.raises(CdictkError, match=str(path)):
        read_document(str(path), json_only=True)


def test_every_rule_broken_is_carried_and_the_first_shown(tmp_path: Path) -> None:
    broken = VALID.replace('name: "0"', 'name: "bad name!"') + '- name: "also bad!"\n  containerEdits: {}\n'
    with pytest.raises(InvalidSpecError) as raised:
        load_spec_data(broken.encode(), "s.yaml")
    problems = raised.value.problems
    assert len(problems) >= 2 and all(problem.file == "s.yaml" for problem in problems)
    assert str(raised.value).startswith(f"{problems[0]} (and {len(problems) - 1} more problems")


def test_one_broken_rule_says_no_more(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpecError) as raised:
        load_spec_data(VALID.replace('name: "0"', 'name: "bad name!"').encode(), "s.yaml")
    assert "more problems" not in str(raised.value) and len(raised.value.problems) == 1


def test_bytes_over_the_cap_are_refused_unread(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match=f"^<stdin>: larger than {MAX_SPEC_BYTES} bytes$"):
        load_spec_data(b" " * (MAX_SPEC_BYTES + 1), "<stdin>")
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(MAX_SPEC_BYTES + 1)
    with pytest.raises(CdictkError, match=str(path)):
        load_spec(str(path))
