"""nodeimage/main.py: ``python -m nodeimage``'s help, its one-line errors, and what each command prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nodeimage import ImageError, lockfile, makeimage
from nodeimage.main import main
from tests import REPO
from tests.unit.nodeimage.test_nodetarball import image_dir


def test_help_explains_both_commands() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "nodeimage", "build", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "ctr images import, podman load" in " ".join(shown.stdout.split())
    assert "--rootfs DIR" in shown.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "nodeimage", "--help"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "lock" in shown.stdout


def test_a_missing_root_is_one_line_and_status_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--rootfs", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"python -m nodeimage build: error: {tmp_path / 'none'}: no such directory "
        "(tests/fetch-rootfs.sh CACHE bookworm-python)\n"
    )
    assert not (tmp_path / "out").exists()


def test_build_prints_the_archive_and_the_reference_with_its_digest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def built(rootfs: Path, out: Path, reference: str | None) -> makeimage.Built:
        assert (rootfs, out, reference) == (tmp_path, tmp_path / "out", "example.org/x:1")
        return makeimage.Built("example.org/x:1", "sha256:abc", out / "oci", out / "x.oci.tar")

    monkeypatch.setattr(makeimage, "build", built)
    argv = [
        "build",
        "--rootfs",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
        "--reference",
        "example.org/x:1",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'out' / 'x.oci.tar'}\nexample.org/x:1@sha256:abc\n"

    def failing(rootfs: Path, out: Path, reference: str | None) -> makeimage.Built:
        raise ImageError("image-root.sh failed")

    monkeypatch.setattr(makeimage, "build", failing)
    assert main(argv) == 1
    assert capsys.readouterr().err == "python -m nodeimage build: error: image-root.sh failed\n"


def test_lock_writes_the_file_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lockfile, "lock", lambda pyproject: f"# from {pyproject.name}\n")
    output = tmp_path / "requirements.lock"
    assert main(["lock", "--output", str(output)]) == 0
    assert output.read_text() == "# from pyproject.toml\n"
    assert capsys.readouterr().out == f"{output}\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["requirements.lock"]


def test_tarball_prints_the_tarball_its_runtime_and_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = image_dir(tmp_path / "image")
    assert main(["tarball", "--image", str(image), "--out", str(tmp_path / "out")]) == 0
    path, runtime_id, size = capsys.readouterr().out.split()
    assert Path(path).parent == tmp_path / "out" and Path(path).stat().st_size == int(size)
    assert len(runtime_id) == 16
    assert main(["tarball", "--image", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m nodeimage tarball: error: ") and err.endswith(": make image builds it\n")
