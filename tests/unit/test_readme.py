"""The README stays short and true: its quick start is what CI runs, and every link resolves."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NodeFactory
from tests.readme import PROJECT, README, Link, anchors, broken, links, quick_start_commands, section, slug


def markdown_files() -> list[Path]:
    """The project's own Markdown files: what git tracks, so that no venv's or tool's files count."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(PROJECT), "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:  # no git: a tarball, or a machine that has only what the quick start installs
        listed = None
    if listed is not None and listed.returncode == 0:
        return sorted(PROJECT / name for name in listed.stdout.splitlines() if (PROJECT / name).exists())
    return sorted({README, *PROJECT.glob("docs/*.md"), *PROJECT.glob("deploy/**/*.md")})


DOCS = markdown_files()


def test_readme_is_short() -> None:
    """A node operator reads it: reference material lives in docs/."""
    assert README.stat().st_size < 15 * 1024


def test_quick_start_is_two_commands_and_ci_runs_the_second() -> None:
    commands = quick_start_commands(README.read_text(encoding="utf-8"))
    assert commands == ["./quickstart demo", "./quickstart test"]
    ci = (PROJECT / ".ci" / "run").read_text().splitlines()
    # A line of its own, as the README has it (what follows it only keeps its exit status).
    assert any(line == commands[1] or line.startswith(commands[1] + " ") for line in ci), ci


def test_the_docs_are_all_found() -> None:
    names = {str(path.relative_to(PROJECT)) for path in DOCS}
    assert {"README.md", "deploy/README.md", "docs/commands.md", "docs/development.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(PROJECT)))
def test_every_link_resolves(path: Path) -> None:
    problems = [problem for link in links(path) if (problem := broken(link)) is not None]
    assert problems == []


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    page = PROJECT / "docs" / "commands.md"
    assert broken(Link(page, 1, "hooks.md#cdictk-hook-name-options")) is None
    assert broken(Link(page, 1, "https://example.com/nowhere")) is None
    assert "no heading #nowhere" in str(broken(Link(page, 7, "hooks.md#nowhere")))
    assert "no such file" in str(broken(Link(page, 7, "missing.md")))
    # Climbs to / from wherever the clone sits: whether the target exists must not matter.
    escape = "../" * len(page.parent.parts) + "etc/hostname"
    assert "outside the project" in str(broken(Link(page, 7, escape)))
    assert "outside the project" in str(broken(Link(page, 7, "../../nowhere-at-all")))


def test_slugs_follow_github() -> None:
    assert slug("`cdictk hook NAME [OPTIONS]`") == "cdictk-hook-name-options"
    assert (
        slug("`cdictk hook prestart`: the legacy hook for `docker run --gpus`")
        == "cdictk-hook-prestart-the-legacy-hook-for-docker-run---gpus"
    )
    assert (
        slug("`cdictk cdi generate [--output FILE|-] [options]`")
        == "cdictk-cdi-generate---output-file--options"
    )
    assert anchors("# A\n```sh\n# not a heading\n```\n## A\n") == {"a", "a-1"}


API_DOC = PROJECT / "docs" / "api.md"


def api_example() -> tuple[str, str]:
    """docs/api.md's example: its Python block and the output block after it."""
    body = section(API_DOC.read_text(encoding="utf-8"), "Example")
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", body, re.DOTALL | re.MULTILINE)
    code = next(text for lang, text in blocks if lang == "python")
    output = next(text for lang, text in blocks if lang == "")
    return code, output


@pytest.mark.root
def test_the_api_example_runs_as_written_on_the_fake_node(make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("eight")
    code, output = api_example()
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {
        **os.environ,
        "DRIVER_ROOT": node.root,
        "PROC_ROOT": node.proc,
        "SYS_ROOT": node.sys,
        "SPEC_DIR": str(tmp_path / "cdi"),
    }
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == output
    assert os.listdir(tmp_path / "cdi") == []


def test_the_api_example_uses_only_documented_names_and_passes_mypy_strict(tmp_path: Path) -> None:
    from cdictk import api

    code, _ = api_example()
    imported = {
        alias.name
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cdictk")
        for alias in node.names
        if node.module == "cdictk.api"
    }
    others = [
        node.module
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cdictk")
    ]
    assert imported and set(others) == {"cdictk.api"}
    assert imported <= set(api.__all__)
    text = API_DOC.read_text(encoding="utf-8")
    assert all(f"`{name}" in text for name in api.__all__), "every exported name is documented"
    script = tmp_path / "client.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        check=False,
    )
    assert result.returncode == 0, result.stdout
