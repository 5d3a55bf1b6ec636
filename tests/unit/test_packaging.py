"""pyproject.toml: setuptools finds every package and takes every file under cdictk/ into the wheel (an
editable install hides a miss, since it imports from the checkout); the version is cdictk/__init__.py's.
tests/e2e/test_wheel.py builds the wheel and sdist and runs the installed wheel."""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from typing import Any

from setuptools import find_namespace_packages

import cdictk
from nodeimage import makeimage
from tests import REPO


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def package_directories() -> dict[str, list[str]]:
    """Each directory under cdictk/ (bytecode caches aside) as a package name, with its files."""
    found = {}
    for directory, subdirectories, files in os.walk(REPO / "cdictk"):
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        found[".".join(os.path.relpath(directory, REPO).split(os.sep))] = files
    return found


def test_packages_are_found_not_listed() -> None:
    """Every directory is a package setuptools finds: code, and data as namespace packages."""
    setuptools = pyproject()["tool"]["setuptools"]
    assert list(setuptools["packages"]) == ["find"]
    include = setuptools["packages"]["find"]["include"]
    assert set(find_namespace_packages(str(REPO), include=include)) == set(package_directories())


def test_every_file_under_cdictk_is_code_or_package_data() -> None:
    data = pyproject()["tool"]["setuptools"]["package-data"]
    left_out = [
        f"{package}: {name}"
        for package, files in package_directories().items()
        for name in files
        if not name.endswith(".py") and not any(fnmatch.fnmatch(name, p) for p in data.get(package, []))
    ]
    assert left_out == []
    # What the runtime reads, among them (cdictk.api's users type-check against it: PEP 561).
    for path in ("py.typed", "cdi/schemas/cdi-spec.schema.json", "noderuntime/launcher.c"):
        assert (REPO / "cdictk" / path).is_file(), path


def test_the_version_is_cdictk_dunder_version_alone() -> None:
    project = pyproject()
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cdictk.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", cdictk.__version__)
    assert makeimage.project()["version"] == cdictk.__version__


# The version spelt out where nothing can read it: the node tarball's, the image archive's and the
# image's names in the docs, the manifests and the Containerfile.
SPELT = re.compile(
    r"cdictk-node-(\d+(?:\.\d+)+)|cdictk-(\d+(?:\.\d+)+)\.oci|example\.com/cdictk:(\d+(?:\.\d+)+)"
)
SPELT_IN = ("README.md", "docs/*.md", "deploy/README.md", "deploy/kubernetes/*", "nodeimage/*.py")


def test_where_the_version_is_spelt_out_it_is_this_one() -> None:
    found = {
        f"{path.relative_to(REPO)}: {next(group for group in match.groups() if group)}"
        for pattern in SPELT_IN
        for path in REPO.glob(pattern)
        if path.is_file()
        for match in SPELT.finditer(path.read_text(encoding="utf-8", errors="replace"))
    }
    assert found, "no name with the version found: the pattern no longer matches the docs"
    assert {line for line in found if not line.endswith(f": {cdictk.__version__}")} == set()
