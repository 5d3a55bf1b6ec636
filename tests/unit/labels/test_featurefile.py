"""NFD's local feature file: rendered sorted with its header and expiry, read back as nfd-worker reads
it, written atomically only when it changes, refused where it cannot be written right."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from cdictk.labels import featurefile
from cdictk.startpath.helpers.errors import CdictkError

LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100", "nvidia.com/gpu.count": "8", "nvidia.com/x": ""}
WHEN = datetime.datetime(2026, 12, 2, 10, 30, 0, tzinfo=datetime.UTC)


def test_render_sorted_with_header_and_expiry() -> None:
    text = featurefile.render(LABELS, WHEN).decode()
    assert text.splitlines() == [
        featurefile.HEADER,
        "# +expiry-time=2026-12-02T10:30:00Z",
        "nvidia.com/gpu.count=8",
        "nvidia.com/gpu.product=NVIDIA-H100",
        "nvidia.com/x=",
    ]
    assert featurefile.parse(text) == (LABELS, WHEN)
    assert "expiry" not in featurefile.render(LABELS).decode()


def test_parse_as_nfd_reads_it() -> None:
    labels, expires = featurefile.parse("# a comment\n\nvendor.io/flag\nvendor.io/a=b=c\n")
    assert labels == {"vendor.io/flag": "true", "vendor.io/a": "b=c"} and expires is None


@pytest.mark.parametrize(
    ("name", "value"), [("gpu.count", "1"), ("Nvidia.com/x", "1"), ("nvidia.com/x", "a\nb")]
)
def test_render_refuses_what_nfd_would_misread(name: str, value: str) -> None:
    with pytest.raises(featurefile.FeatureFileError, match="cannot write"):
        featurefile.render({name: value})


def test_render_refuses_a_file_nfd_would_ignore() -> None:
    with pytest.raises(featurefile.FeatureFileError, match="NFD ignores"):
        featurefile.render({f"nvidia.com/l{n}": "v" * 60 for n in range(1200)})


def test_update_writes_0644_only_when_changed_and_remove(tmp_path: Path) -> None:
    path = str(tmp_path / "features.d" / "cdictk-gpu")
    data = featurefile.render(LABELS)
    assert featurefile.update(path, data)[0]
    inode = os.stat(path).st_ino
    assert (os.stat(path).st_mode & 0o777) == 0o644
    assert not featurefile.update(path, data)[0]
    assert os.stat(path).st_ino == inode
    assert not [name for name in os.listdir(tmp_path / "features.d") if name != "cdictk-gpu"]
    assert featurefile.remove(path) and not featurefile.remove(path)


def test_a_symlink_at_the_path_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "cdictk-gpu"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CdictkError, match="not a regular file"):
        featurefile.update(str(link), featurefile.render(LABELS))
    assert not (tmp_path / "elsewhere").exists()
