"""The docs stay reference for users: each page short enough to read, every link resolving, and no
tracker numbers or lab-notebook wording in the docs or the tests (history is CHANGELOG.md's, figures
bench/README.md's)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.readme import PROJECT, broken, links

LIMIT = 30 * 1024
# What a reader of the repository cannot follow: a tracker's numbers, and the session that wrote it.
# Another project's public issue ("NVIDIA's issue #1385") names where to look, so "#N" is left alone.
NOTEBOOK = re.compile(r"(?i)\bissues?\s+\d|\bthis\s+round\b")
# What a reference page must not carry: one machine's passing figures and their verdicts.
FIGURES = re.compile(r"(?i)\((?:met|missed)\)|\bthis (?:2-core )?VM\b")
TREES = ("cdictk", "tests", "bench", "deploy", "docs", "examples", "realnode", "nodeimage")
SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".c", ".cu", ".proto"}


def project_files() -> list[Path]:
    """The files a clone has (what git lists; every file of the trees without git), test data left out."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(PROJECT), "ls-files", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        listed = None
    if listed is not None and listed.returncode == 0:
        paths = [PROJECT / name for name in listed.stdout.splitlines()]
    else:
        paths = [path for tree in TREES for path in (PROJECT / tree).rglob("*")]
        paths += [PROJECT / "README.md", PROJECT / "CHANGELOG.md"]
    return sorted(
        path
        for path in paths
        if path.suffix in SUFFIXES
        and path.is_file()
        and not path.is_symlink()
        and (path.parent == PROJECT or path.relative_to(PROJECT).parts[0] in TREES)
        and path.relative_to(PROJECT).parts[:2] != ("tests", "data")
    )


def pages() -> list[Path]:
    """What a user reads: the README, the reference pages, deploy's and bench's READMEs, the changelog."""
    found = [PROJECT / "README.md", PROJECT / "CHANGELOG.md", PROJECT / "deploy" / "README.md"]
    found += [PROJECT / "bench" / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
    return found


def name(path: Path) -> str:
    return str(path.relative_to(PROJECT)) if path.is_relative_to(PROJECT) else str(path)


def notebook_lines(path: Path, pattern: re.Pattern[str] = NOTEBOOK) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [
        f"{name(path)}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if pattern.search(line)
    ]


def test_the_pages_are_there() -> None:
    for path in pages():
        assert path.is_file(), name(path)
    assert {"architecture.md", "development.md", "testing.md", "commands.md"} <= {
        path.name for path in (PROJECT / "docs").glob("*.md")
    }


@pytest.mark.parametrize("path", pages(), ids=name)
def test_no_page_is_over_30_kb(path: Path) -> None:
    """A page over 30 KB is two topics: split it, and move its links along."""
    assert path.stat().st_size <= LIMIT, f"{name(path)}: {path.stat().st_size} bytes, over {LIMIT}"


@pytest.mark.parametrize("path", pages(), ids=name)
def test_every_relative_link_of_a_page_resolves(path: Path) -> None:
    assert [problem for link in links(path) if (problem := broken(link)) is not None] == []


def test_no_file_cites_a_tracker_or_a_round() -> None:
    """Tests name the behaviour they guard; docs say what is, not which session made it so."""
    found = [line for path in project_files() for line in notebook_lines(path)]
    assert found == []


def test_no_reference_page_carries_one_machines_verdicts() -> None:
    """Figures, with their machine and date, live in bench/README.md; a reference page links there."""
    reference = [path for path in pages() if path.name not in ("CHANGELOG.md",) and "bench" not in path.parts]
    assert [line for path in reference for line in notebook_lines(path, FIGURES)] == []


def test_the_checks_would_fail(tmp_path: Path) -> None:
    """Each check sees what it is there to refuse (the words built here, so this file holds none)."""
    page = tmp_path / "page.md"
    page.write_text(
        "fixed in " + "Issue " + "19.\n" + "until this " + "round.\n" + "ratio 0.9 (" + "missed)\n"
    )
    assert len(notebook_lines(page)) == 2
    assert len(notebook_lines(page, FIGURES)) == 1
    page.write_text("NVIDIA's issue #1385 says why.\n")
    assert notebook_lines(page) == []
    assert (PROJECT / "tests" / "unit" / "test_docs.py") in project_files()
