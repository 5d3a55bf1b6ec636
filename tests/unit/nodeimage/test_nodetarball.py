"""nodeimage/nodetarball.py: the node runtime make image staged, as one tarball holding one directory,
the same bytes from the same runtime; a missing or damaged runtime is one line."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from cdictk.noderuntime import manifest
from nodeimage import ImageError, imageroot, makeimage, nodetarball
from tests.fakeruntime import fake_runtime


def image_dir(root: Path) -> Path:
    """What make image leaves in OUT: the runtime in the staged cdictk layer."""
    fake_runtime(root / "cdictk" / imageroot.layout().bundle.lstrip("/"))
    return root


def test_the_runtime_as_one_directory_the_same_bytes_each_time(tmp_path: Path) -> None:
    image = image_dir(tmp_path / "image")
    first = nodetarball.build(image, tmp_path / "a")
    again = nodetarball.build(image, tmp_path / "b")
    version = makeimage.project()["version"]
    assert first.path == tmp_path / "a" / f"cdictk-node-{version}-{makeimage.machine()}.tar.gz"
    assert first.path.read_bytes() == again.path.read_bytes()
    assert first.size == first.path.stat().st_size
    runtime = nodetarball.runtime_in(image)
    assert first.runtime_id == manifest.runtime_id(manifest.read(str(runtime))[0])
    with tarfile.open(first.path) as tar:
        tar.extractall(tmp_path / "out")  # noqa: S202 - the archive this test just wrote
    assert [path.name for path in (tmp_path / "out").iterdir()] == [f"cdictk-node-{version}"]
    unpacked = tmp_path / "out" / f"cdictk-node-{version}"
    assert manifest.mismatch(str(unpacked), manifest.read(str(unpacked))[1]) is None
    assert sorted(path.name for path in tmp_path.glob("a/.*")) == []  # no partial file left


def test_no_runtime_or_a_damaged_one_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"no node runtime there \(.*\): make image builds it"):
        nodetarball.build(tmp_path, tmp_path / "out")
    image = image_dir(tmp_path / "image")
    (nodetarball.runtime_in(image) / "lib" / "libc.so.6").write_text("changed")
    with pytest.raises(ImageError, match=r"not as its manifest says: .*libc\.so\.6"):
        nodetarball.build(image, tmp_path / "out")
    assert not list((tmp_path / "out").glob("*.tar.gz"))
