"""The output policy of `cdi generate` as a library call: where the spec goes and what it replaces."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cdictk.nvcdi import specfile


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_000")
def test_a_spec_under_new_directories_is_0644_under_0755_parents_whatever_the_umask(tmp_path: Path) -> None:
    output = tmp_path / "a" / "b" / "cdi" / "nvidia.yaml"
    specfile.write(str(output), b"spec")
    assert [mode_of(tmp_path / name) for name in ("a", "a/b", "a/b/cdi")] == [0o755] * 3
    assert mode_of(output) == 0o644
