"""nodeimage/makeimage.py: the image's time, name and settings come from the clone (its last commit, the
DaemonSet manifest, image-root.sh's paths, pyproject.toml); the context holds what image-root.sh
installs and only the lock's wheels; assembling the same trees twice gives the same digest.

The build as a whole (PyPI, the Debian root, chroot) runs in tests/e2e/test_image.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeimage import ImageError, imageroot, lockfile, makeimage
from nodeimage.ocilayout import read_image
from nodeimage.tarlayer import Prune
from tests import REPO

EPOCH = 1_700_000_000


def test_the_epoch_is_source_date_epoch_else_the_last_commits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234")
    assert makeimage.source_epoch() == 1234
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ImageError, match=r"SOURCE_DATE_EPOCH='yesterday': want seconds since 1970"):
        makeimage.source_epoch()
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    # A clone: its last commit's time (a clone of its own: the tests may run in a copy without git).
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "pyproject.toml").write_text("")
    os.utime(clone / "pyproject.toml", (9000, 9000))
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "pyproject.toml"], check=True)
    dated = {**os.environ, "GIT_COMMITTER_DATE": "@4000 +0000", "GIT_AUTHOR_DATE": "@4000 +0000"}
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True, env=dated)
    assert makeimage.source_epoch(clone) == 4000
    # A copy without git (a release's tarball): the newest of the files the wheel is built from.
    copy = tmp_path / "copy"
    copy.mkdir()
    with pytest.raises(ImageError, match=r"none of pyproject.toml, README.md, cdictk is there"):
        makeimage.source_epoch(copy)
    (copy / "cdictk").mkdir()
    for name, when in (("pyproject.toml", 1000), ("cdictk/new.py", 3000), ("cdictk/old.py", 2000)):
        (copy / name).write_text("")
        os.utime(copy / name, (when, when))
    assert makeimage.source_epoch(copy) == 3000


def test_the_image_is_named_as_the_daemonset_runs_it(tmp_path: Path) -> None:
    reference = makeimage.manifest_reference()
    text = makeimage.MANIFEST.read_text()
    assert text.count(f"image: {reference}\n") >= 3
    other = tmp_path / "manifest.yaml"
    other.write_text(text.replace(f"image: {reference}\n", "image: example.org/other:1\n", 1))
    with pytest.raises(ImageError, match=r"manifest.yaml: its containers name 2 images, want one"):
        makeimage.manifest_reference(other)


def test_the_settings_run_cdictk_from_the_venv_image_root_sh_makes() -> None:
    settings = makeimage.image_settings("aarch64", "minbase-bookworm-python")
    venv = imageroot.layout().venv
    assert settings.architecture == "arm64"
    assert settings.entrypoint == [f"{venv}/bin/cdictk"]
    assert settings.env[0] == f"PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert "PYTHONDONTWRITEBYTECODE=1" in settings.env
    assert settings.labels["org.opencontainers.image.version"] == makeimage.project()["version"]
    assert settings.labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert len(settings.history) == 2
    assert "minbase-bookworm-python" in settings.history[0]


def test_tracked_files_are_gits_and_the_new_ones_it_would_add(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    for name in ("pkg/a.py", "pkg/new.py", "pkg/__pycache__/a.cpython-311.pyc", "other.py"):
        (tmp_path / name).write_text("")
    subprocess.run(["git", "-C", str(tmp_path), "add", "pkg/a.py"], check=True)
    assert makeimage._tracked(tmp_path, ["pkg"]) == ["pkg/a.py", "pkg/new.py"]
    # The same tree without git: every file but bytecode and build metadata, links as links.
    shutil.rmtree(tmp_path / ".git")
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "schema.json").write_text("{}")
    (tmp_path / "pkg" / "data").symlink_to("../schemas")
    (tmp_path / "pkg" / "x.egg-info").mkdir()
    (tmp_path / "pkg" / "x.egg-info" / "PKG-INFO").write_text("")
    assert makeimage._tracked(tmp_path, ["pkg", "other.py", "none"]) == [
        "other.py",
        "pkg/a.py",
        "pkg/data",
        "pkg/new.py",
    ]


def test_the_context_holds_what_image_root_sh_installs_and_only_the_locks_wheels(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pins = lockfile.parse(makeimage.LOCK.read_text())
    fetched: list[str] = []

    def download(lock: Path, destination: Path, machine: str) -> None:
        """pip as the cache's stand-in: each pinned wheel, named for what it holds (its hash)."""
        assert (lock, machine) == (makeimage.LOCK, "x86_64")
        fetched.append(machine)
        for pin in pins:
            (destination / f"{pin.name}-{pin.version}-py3-none-any.whl").write_text(pin.hashes[0])

    monkeypatch.setattr(lockfile, "download", download)
    monkeypatch.setattr(lockfile, "wheel_hash", lambda path: path.read_text())
    monkeypatch.setattr(
        makeimage, "build_wheel", lambda repo, where, epoch: (where / "cdictk-0-py3-none-any.whl").touch()
    )
    monkeypatch.setattr(makeimage, "compile_launcher", lambda output: output.write_bytes(b"\x7fELF"))
    out = tmp_path / "out"
    (out / "wheels").mkdir(parents=True)
    (out / "wheels" / "stale-1.0-py3-none-any.whl").write_text("0" * 64)  # an older lock's
    context = makeimage.prepare_context(REPO, out, "x86_64", EPOCH)
    assert sorted(path.name for path in context.iterdir()) == [
        "cdictk-node-setup.sh",
        "image-root.sh",
        "launcher",
        "requirements.lock",
        "wheels",
    ]
    assert sorted(path.name for path in (context / "wheels").iterdir()) == sorted(
        ["cdictk-0-py3-none-any.whl", *(f"{pin.name}-{pin.version}-py3-none-any.whl" for pin in pins)]
    )
    assert (context / "image-root.sh").read_bytes() == imageroot.SCRIPT.read_bytes()
    assert (context / "requirements.lock").read_bytes() == makeimage.LOCK.read_bytes()
    # Built again: every pinned wheel is in the cache, so nothing is fetched.
    makeimage.prepare_context(REPO, out, "x86_64", EPOCH)
    assert fetched == ["x86_64"]
    # A download that leaves a pin out is an error, not an image without it.
    for wheel in (out / "wheels").glob("click-*"):
        wheel.unlink()
    monkeypatch.setattr(lockfile, "download", lambda lock, destination, machine: None)
    with pytest.raises(
        ImageError, match=r"pip download left a wheel requirements\.lock pins for x86_64 out of"
    ):
        makeimage.prepare_context(REPO, out, "x86_64", EPOCH)


def test_assembling_the_same_trees_twice_gives_the_same_image(tmp_path: Path) -> None:
    trees = []
    for name in ("base", "cdictk"):
        tree = tmp_path / name
        (tree / "usr" / name).mkdir(parents=True)
        (tree / "usr" / name / "file").write_text(name)
        trees.append((tree, Prune()))
    settings = makeimage.image_settings("x86_64", "base")
    digests = []
    for run in ("one", "two"):
        out = tmp_path / run
        digests.append(
            makeimage.assemble(
                trees,
                settings,
                reference="example.org/cdictk:1",
                epoch=EPOCH,
                out=out / "oci",
                archive=out / "a.tar",
            )
        )
    assert digests[0] == digests[1]
    assert (tmp_path / "one" / "a.tar").read_bytes() == (tmp_path / "two" / "a.tar").read_bytes()
    image = read_image(tmp_path / "one" / "oci")
    assert image.digest == digests[0]
    assert len(image.config["rootfs"]["diff_ids"]) == 2
    index = json.loads((tmp_path / "one" / "oci" / "index.json").read_text())
    assert index["manifests"][0]["platform"]["architecture"] == "amd64"
    # Built again in place: the old layout is replaced whole, no temp directory stays.
    makeimage.assemble(
        trees, settings, reference="r:1", epoch=EPOCH, out=tmp_path / "one" / "oci", archive=tmp_path / "b"
    )
    assert sorted(path.name for path in (tmp_path / "one").iterdir()) == ["a.tar", "oci"]


def test_the_version_is_the_one_setuptools_reads_from_cdictk(tmp_path: Path) -> None:
    """pyproject.toml's version is dynamic: the literal ``__version__`` of cdictk/__init__.py."""
    (tmp_path / "cdictk").mkdir()
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "cdictk" / "__init__.py"
    module.write_text('"""doc"""\n\nimport os\n__version__ = "7.8.9"\nOTHER = "1"\n')
    assert makeimage.project(tmp_path)["version"] == "7.8.9"
    assert makeimage.project(tmp_path)["name"] == "cdictk"
    module.write_text("__version__ = compute()\n")
    with pytest.raises(ImageError, match=r'__init__.py: no __version__ = "VERSION" of its own'):
        makeimage.project(tmp_path)
