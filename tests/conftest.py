"""Fixtures shared by the unit and end-to-end tests: fake GPU nodes built on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdictk.startpath.helpers.roots import Roots
from tests.fakenode.node import FakeNode, Preset, build_node
from tests.fakenode.platforms import PlatformNode, build_platform
from tests.fakenode.tools import MissingTool, node_tools
from tests.mountns import enter_own_mount_namespace
from tests.rootmarker import pytest_collection_modifyitems, root_only  # noqa: F401 (the marker's check, a hook)

# pytester runs the root marker's check on test files of its own (tests/unit/test_root_marker.py).
pytest_plugins = ["pytester"]

NodeFactory = Callable[..., FakeNode]
MOUNT_NAMESPACE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The session runs in a mount namespace of its own (tests/mountns.py), entered before any test
    or thread starts: the mount tables the tests compare change only through what they do."""
    config.stash[MOUNT_NAMESPACE] = enter_own_mount_namespace()


def pytest_report_header(config: pytest.Config) -> str:
    return config.stash.get(MOUNT_NAMESPACE, "mount namespace: the host's")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """With ``CDICTK_NO_SKIP=1`` (CI sets it) a skip is a failure: a missing runtime, a mirror that
    cannot be reached or a lost capability must not turn the end-to-end tests green by not running."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get("CDICTK_NO_SKIP") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, and CDICTK_NO_SKIP=1 allows no skip: {reason}"


def require_node_tools() -> None:
    try:
        node_tools()
    except MissingTool as missing:
        pytest.skip(f"a fake GPU node {missing}; ./quickstart test, as root, installs what it needs")


@pytest.fixture(autouse=True)
def private_runtime_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """The runtime shim's parse cache (root's default: /run/cdictk) in a directory of this test's own.

    Subprocesses inherit it through the environment; tests that build an environment of their own add
    ``CDICTK_CACHE_DIR`` from ``os.environ``.
    """
    directory = str(tmp_path_factory.mktemp("runtime-cache"))
    monkeypatch.setenv("CDICTK_CACHE_DIR", directory)
    return directory


@pytest.fixture
@root_only
def root_dir(tmp_path: Path) -> Path:
    """A root-owned 0755 directory (tmp_path's parents are root's, /tmp sticky), for tests that give
    files to another user, which root alone can."""
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    return base


@pytest.fixture
def umask_000() -> Iterator[None]:
    """Root's umask at its loosest (what a careless service manager may hand us): whatever is
    created gets the mode it is created with."""
    old = os.umask(0)
    yield
    os.umask(old)


@pytest.fixture(scope="session")
def stub_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Compiled stub libraries, shared by every node of the session (gcc runs once per SONAME)."""
    return str(tmp_path_factory.mktemp("stub-cache"))


@pytest.fixture
@root_only
def make_node(tmp_path: Path, stub_cache: str) -> NodeFactory:
    """``make_node("single")`` or ``make_node("eight")``: a fresh fake node under this test's tmp_path."""
    require_node_tools()
    count = 0

    def make(preset: str | Preset = "single") -> FakeNode:
        nonlocal count
        count += 1
        return build_node(str(tmp_path / f"node{count}"), preset, stub_cache)

    return make


def roots_of(node: FakeNode) -> Roots:
    """The roots discovery reads a fake node through: its tree as driver and dev root, its procfs, sysfs."""
    return Roots(driver=node.root, dev=node.root, proc=node.proc, sys=node.sys)


def node_with_spec(
    tmp_path_factory: pytest.TempPathFactory, stub_cache: str, name: str, preset: str = "single"
) -> tuple[FakeNode, Path]:
    """A fake node and a spec dir holding ``nvidia.yaml`` as ``cdictk cdi generate`` writes it for the node,
    for module-scoped fixtures (``name`` names their directories; declare them :func:`root_only`)."""
    require_node_tools()
    node = build_node(str(tmp_path_factory.mktemp(f"{name}-node") / "node"), preset, stub_cache)
    spec_dir = tmp_path_factory.mktemp(f"{name}-cdi")
    generate = [sys.executable, "-m", "cdictk", "cdi", "generate", *node.cli_args()]
    result = subprocess.run(
        [*generate, "--output", str(spec_dir / "nvidia.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return node, spec_dir


PlatformFactory = Callable[[str], PlatformNode]


@pytest.fixture
@root_only
def make_platform(tmp_path: Path, stub_cache: str) -> PlatformFactory:
    """``make_platform("wsl")`` (or jetson, imex, nvswitch, gds, mofed, gdrcopy): a fresh fake node of
    another generate mode under this test's tmp_path (tests/fakenode/platforms.py)."""
    require_node_tools()

    def make(name: str) -> PlatformNode:
        return build_platform(str(tmp_path / f"platform-{name}"), name, stub_cache)

    return make
