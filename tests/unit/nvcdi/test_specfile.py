"""The output policy of `cdi generate` as a library call: where the spec goes and what it replaces.

Another owner is an unused uid, which needs root (`make test`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import cast

import pytest

from cdictk.nvcdi import specfile
from cdictk.nvcdi.nodespec import NodeSpec
from cdictk.startpath.helpers.roots import Roots


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_000")
def test_a_spec_under_new_directories_is_0644_under_0755_parents_whatever_the_umask(tmp_path: Path) -> None:
    output = tmp_path / "a" / "b" / "cdi" / "nvidia.yaml"
    specfile.write(str(output), b"spec")
    assert [mode_of(tmp_path / name) for name in ("a", "a/b", "a/b/cdi")] == [0o755] * 3
    assert mode_of(output) == 0o644


@pytest.mark.root
def test_the_same_spec_owned_by_someone_else_is_replaced_and_said_so(tmp_path: Path) -> None:
    output = tmp_path / "nvidia.yaml"
    specfile.write(str(output), b"spec")
    os.chown(output, 12345, 12345)  # still 0644 and the same bytes, but its owner could edit the hooks
    written, _, replaced = specfile.update(str(output), b"spec")
    assert (written, replaced) == (True, "owned by uid 12345")
    assert (output.stat().st_uid, mode_of(output)) == (os.geteuid(), 0o644)
    assert specfile.update(str(output), b"spec")[::2] == (False, None)  # ours now: left alone
    assert (
        specfile.wrote(str(output), replaced) == f"wrote {output}: replaced the same spec owned by uid 12345"
    )


def test_a_killed_runs_temp_file_is_removed_by_the_next_run_even_with_nothing_to_write(
    tmp_path: Path,
) -> None:
    output = tmp_path / "nvidia.yaml"
    specfile.write(str(output), b"spec")
    (tmp_path / ".nvidia.yaml.0123456789ab.tmp").write_bytes(b"sp")  # kill -9 between write and rename
    assert specfile.update(str(output), b"spec")[0] is False
    assert os.listdir(tmp_path) == ["nvidia.yaml"]


@pytest.mark.root
def test_watch_puts_back_a_spec_someone_chowned(tmp_path: Path) -> None:
    class Made:
        summary = "1 device"

        def __init__(self) -> None:
            self.warnings: list[str] = []

        def dump(self, fmt: str) -> bytes:
            return b"spec\n"

    output = tmp_path / "nvidia.yaml"
    said: list[str] = []
    node = str(tmp_path / "node")
    watched = specfile.WatchedSpec(
        lambda: cast(NodeSpec, Made()),
        roots=Roots.from_options(node, node, f"{node}/proc", f"{node}/sys"),
        output=str(output),
        fmt="yaml",
        say=said.append,
        warn=said.append,
    )
    watched.regenerate()
    settled = watched.fingerprint()
    os.chown(output, 12345, 12345)
    assert watched.fingerprint() != settled  # so the watch looks again
    watched.regenerate()
    assert output.stat().st_uid == os.geteuid()
    assert said == [
        f"wrote {output} (1 device)",
        f"wrote {output}: replaced the same spec owned by uid 12345 (1 device)",
    ]
