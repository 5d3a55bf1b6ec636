"""The ``root`` marker, as a pytest plugin (tests/conftest.py loads it).

A test that needs root (mknod, mounts, namespaces, cgroups, files given to another user) carries
``@pytest.mark.root`` (a whole file: ``pytestmark = pytest.mark.root``); run by anyone else it is
skipped with one reason, and ``pytest -m "not root"`` leaves it out. The marker is kept in step with
the need at collection: a test that uses a fixture decorated with :func:`root_only`, or any test under
tests/e2e, fails collection without it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

Fixture = TypeVar("Fixture", bound=Callable[..., object])

SKIP_REASON = (
    "needs root: mknod, mounts, namespaces or files of other owners (run the tests as root, "
    "or leave these out with -m 'not root')"
)
# The end-to-end tests drive runc, crun, podman and containerd on fake nodes made with mknod.
E2E = Path(__file__).parent / "e2e"
_ROOT_ONLY = "_cdictk_root_only"


def root_only(fixture: Fixture) -> Fixture:
    """Declare a fixture that needs root; put it under ``@pytest.fixture``. A test that uses it,
    directly or through other fixtures, must carry ``@pytest.mark.root``."""
    setattr(fixture, _ROOT_ONLY, True)
    return fixture


def root_fixtures(item: pytest.Item) -> list[str]:
    """The fixtures declared :func:`root_only` that ``item`` uses, its own and those of its fixtures."""
    # pytest.Function keeps the fixture closure it resolved at collection here; other items have none.
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return sorted(
        name
        for name, definitions in info.name2fixturedefs.items()
        if any(getattr(definition.func, _ROOT_ONLY, False) for definition in definitions)
    )


def unmarked_need(item: pytest.Item) -> list[str]:
    """Why ``item`` needs root although it lacks the marker (empty when it has it or needs none)."""
    if item.get_closest_marker("root") is not None:
        return []
    needs = root_fixtures(item)
    if E2E in item.path.parents:
        needs.append("an end-to-end test")
    return needs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [f"{item.nodeid} ({', '.join(needs)})" for item in items if (needs := unmarked_need(item))]
    if unmarked:
        raise pytest.UsageError(
            "these tests need root but lack @pytest.mark.root:\n  " + "\n  ".join(unmarked)
        )
    if os.geteuid() != 0:
        for item in items:
            if item.get_closest_marker("root") is not None:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
