"""One error shape for every command: ``<file>: <field>: <reason>``, its empty parts left out."""

from __future__ import annotations

import pytest

from cdictk.startpath.helpers.errors import CdictkError, HookError, Problem


def test_a_problem_reads_as_its_non_empty_parts_and_compares_by_value() -> None:
    assert str(Problem("spec.yaml", "devices[0].name", "empty")) == "spec.yaml: devices[0].name: empty"
    assert str(Problem("", "--cdi-version", "unknown")) == "--cdi-version: unknown"
    assert str(Problem("", "", "no GPUs")) == "no GPUs"
    same, other = Problem("f", "x", "r"), Problem("f", "x", "s")
    assert same == Problem("f", "x", "r") and same not in (other, "f: x: r")
    assert len({same, Problem("f", "x", "r"), other}) == 2
    assert repr(same) == "Problem(file='f', field='x', reason='r')"


def test_an_error_carries_its_problem_and_can_be_given_its_file_later() -> None:
    error = CdictkError("", "kind", "not a kind")
    assert str(error) == "kind: not a kind" and error.problem == Problem("", "kind", "not a kind")
    placed = error.in_file("/etc/cdi/nvidia.yaml")
    assert str(placed) == "/etc/cdi/nvidia.yaml: kind: not a kind"
    assert isinstance(placed, CdictkError) and str(error) == "kind: not a kind"  # the original unchanged


def test_a_hook_error_is_its_one_line() -> None:
    with pytest.raises(HookError, match=r"^chmod: cannot resolve /dev/x$"):
        raise HookError("chmod: cannot resolve /dev/x")
    assert not issubclass(HookError, CdictkError)  # the hooks print their own prefix
