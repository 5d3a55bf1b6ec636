"""pyproject.toml lists every package: a `pip install .` must not lose a subpackage (editable installs
hide such a miss, since they import from the checkout)."""

from __future__ import annotations

import tomllib

from tests import REPO

ROOT = REPO


def test_every_package_directory_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "cdictk").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found == listed, f"missing from pyproject.toml: {sorted(found - listed)}"


def test_the_package_is_marked_typed() -> None:
    """cdictk.api's users type-check against it (PEP 561): the marker and its package data go together."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert (ROOT / "cdictk" / "py.typed").is_file()
    assert "py.typed" in data["cdictk"]
