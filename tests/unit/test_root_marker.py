"""The ``root`` marker (tests/rootmarker.py): a test that needs root without saying so fails
collection; one that says so is skipped, with one reason, when the suite runs as anyone else."""

from __future__ import annotations

import os

import pytest

from tests import rootmarker

CONFTEST = """
import pytest
from tests.rootmarker import pytest_collection_modifyitems, root_only

@pytest.fixture
@root_only
def device_node(tmp_path):
    return tmp_path

@pytest.fixture(scope="module")
@root_only
def shared_node(tmp_path_factory):
    return tmp_path_factory.mktemp("node")

@pytest.fixture
def through(device_node):
    return device_node
"""
TESTS = """
import pytest

def test_plain():
    pass

@pytest.mark.root
def test_marked(device_node, shared_node):
    pass
"""
UNMARKED = """
def test_direct(device_node):
    pass

def test_through_another_fixture(through):
    pass

def test_module_scoped(shared_node):
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n    root: needs root\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    return suite.runpytest_inprocess("-p", "no:cacheprovider", "-rs", *args)


def test_a_test_using_a_root_fixture_unmarked_fails_collection_naming_it(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_unmarked=UNMARKED)
    result = run(suite, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = "\n".join(result.errlines)
    assert "need root but lack @pytest.mark.root" in error
    for named in (
        "test_unmarked.py::test_direct (device_node)",
        "test_unmarked.py::test_through_another_fixture (device_node)",
        "test_unmarked.py::test_module_scoped (shared_node)",
    ):
        assert named in error
    assert "test_marked" not in error and "test_plain" not in error


def test_deselecting_the_marked_tests_still_checks_the_rest(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_unmarked=UNMARKED)
    assert run(suite, "-m", "not root").ret == pytest.ExitCode.USAGE_ERROR


def test_every_end_to_end_test_must_be_marked(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    e2e = suite.mkpydir("e2e")
    (e2e / "test_engine.py").write_text("def test_runs_a_container():\n    pass\n")
    monkeypatch.setattr(rootmarker, "E2E", e2e)
    result = run(suite, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "e2e/test_engine.py::test_runs_a_container (an end-to-end test)" in "\n".join(result.errlines)
    (e2e / "test_engine.py").write_text(
        "import pytest\npytestmark = pytest.mark.root\n\ndef test_x():\n    pass\n"
    )
    assert run(suite, "--collect-only").ret == pytest.ExitCode.OK


def test_not_root_a_marked_test_is_skipped_with_one_reason(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = run(suite)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED *test_suite.py:*: {rootmarker.SKIP_REASON}"])
    assert rootmarker.SKIP_REASON.startswith("needs root: ")


def test_as_root_a_marked_test_runs(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    run(suite).assert_outcomes(passed=2)


def test_not_root_selects_the_rest(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = run(suite, "-m", "not root")
    result.assert_outcomes(passed=1, deselected=1)
