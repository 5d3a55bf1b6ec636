"""Which node runtime this interpreter runs from, and the paths that follow from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cdictk.bundlelayout import installed_prefix, stable_hook, stable_program
from cdictk.startpath.helpers.bundlepaths import bundled_ldconfig, running_bundle


def version_tree(root: Path, *, ldconfig: bool = True) -> Path:
    """What the interpreter of an installed runtime sees as its prefix: MANIFEST, libexec/python3."""
    (root / "libexec").mkdir(parents=True)
    (root / "MANIFEST").write_text("cdictk-node-runtime-manifest 1\n")
    (root / "libexec" / "python3").write_bytes(b"\x7fELF")
    if ldconfig:
        (root / "libexec" / "ldconfig").write_bytes(b"\x7fELF")
    return root


def test_outside_a_runtime_nothing_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert running_bundle() is None
    assert stable_hook() is None
    assert stable_program("cdictk-runtime") is None
    assert bundled_ldconfig() is None


def test_an_installed_version_names_the_stable_hook_of_its_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    version = version_tree(tmp_path / "opt" / "cdictk" / "versions" / "0123456789abcdef")
    monkeypatch.setattr(sys, "prefix", str(version))
    assert running_bundle() == str(version)
    assert installed_prefix(str(version)) == str(tmp_path / "opt" / "cdictk")
    assert stable_hook() == str(tmp_path / "opt" / "cdictk" / "current" / "bin" / "cdictk-hook")
    assert stable_program("cdictk-runtime") == str(tmp_path / "opt" / "cdictk" / "bin" / "cdictk-runtime")
    assert stable_program("python3") is None  # not one of the prefix's stable paths
    assert bundled_ldconfig() == str(version / "libexec" / "ldconfig")


def test_a_runtime_not_installed_has_no_stable_hook(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run where it was built or unpacked (the image's copy): its own hook path would not outlive it,
    so the generator keeps to its default."""
    bundle = version_tree(tmp_path / "node-runtime", ldconfig=False)
    monkeypatch.setattr(sys, "prefix", str(bundle))
    assert running_bundle() == str(bundle)
    assert installed_prefix(str(bundle)) is None
    assert stable_hook() is None
    assert bundled_ldconfig() is None  # this one carries none
