"""pyproject.toml: setuptools finds every package and takes every file under cdictk/ into the wheel (an
editable install hides a miss, since it imports from the checkout)."""

from __future__ import annotations

import fnmatch
import os
import tomllib
from typing import Any

from setuptools import find_namespace_packages

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
