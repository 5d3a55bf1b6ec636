"""nodeimage/imageroot.py: image-root.sh runs in a chroot of an overlay of the base root, whose upper
directory is then exactly what the script added (the base untouched, the mounts gone); a script that
removes or replaces something of the base is refused; the base layer leaves out what it should.

The staging tests run a stand-in image-root.sh in a busybox root, as root (overlayfs, chroot)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from nodeimage import ImageError, imageroot
from nodeimage.tarlayer import entries
from tests.e2e.conftest import build_busybox_rootfs, busybox_problem
from tests.rootmarker import root_only

STAND_IN = """\
set -eu
context=$1
mkdir -p /usr/local/lib/cdictk-venv/bin /usr/local/bin
cp "$context/payload" /usr/local/lib/cdictk-venv/bin/cdictk
# What it sees: its context read-only, a /proc and a /dev of its own, a private /tmp.
touch "$context/written" 2>/dev/null && echo "context writable" >&2 && exit 3
test -r /proc/self/status && test -c /dev/null
echo scratch > /tmp/scratch
env > /usr/local/lib/cdictk-venv/env
"""


@pytest.fixture
@root_only
def base(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("staging the image's root needs root (overlayfs, chroot)")
    problem = busybox_problem()
    if problem is not None:
        pytest.skip(problem)
    root = tmp_path / "base"
    build_busybox_rootfs(root)
    (root / "usr" / "bin" / "python3").write_text("not run\n")
    (root / "usr" / "local" / "lib").mkdir(parents=True)
    (root / "etc" / "keep").write_text("base\n")
    return root


def context_with(tmp_path: Path, script: str) -> Path:
    context = tmp_path / "context"
    context.mkdir()
    (context / "image-root.sh").write_text(script)
    (context / "payload").write_text("#!/bin/sh\n")
    return context


def snapshot(root: Path) -> list[tuple[str, int, int, float]]:
    return [(name, s.st_mode, s.st_size, s.st_mtime) for name, s in entries(root)]


@pytest.mark.root
def test_the_upper_directory_is_what_the_script_added(base: Path, tmp_path: Path) -> None:
    before = snapshot(base)
    upper = tmp_path / "out" / "cdictk"
    imageroot.stage(base, context_with(tmp_path, STAND_IN), upper)
    names = [name for name, _ in entries(upper)]
    assert names == [
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/lib",
        "usr/local/lib/cdictk-venv",
        "usr/local/lib/cdictk-venv/bin",
        "usr/local/lib/cdictk-venv/bin/cdictk",
        "usr/local/lib/cdictk-venv/env",
    ]
    # Nothing of this machine's environment but what ENV says (the shell adds its own few).
    environment = (upper / "usr/local/lib/cdictk-venv/env").read_text().split()
    assert sorted(line for line in environment if line.split("=")[0] not in {"PWD", "SHLVL", "_"}) == sorted(
        imageroot.ENV
    )
    assert snapshot(base) == before
    assert not (tmp_path / "context" / "written").exists()
    # Nothing stays mounted, and the overlay's scratch space is gone.
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert sorted(os.listdir(tmp_path / "out")) == ["cdictk"]


@pytest.mark.root
def test_a_failing_script_is_an_error_with_its_last_lines(base: Path, tmp_path: Path) -> None:
    script = "echo 'image-root.sh: error: no pip wheel' >&2\nexit 1\n"
    with pytest.raises(
        ImageError, match=r"(?s)failed in .* \(status 1\):\nimage-root.sh: error: no pip wheel$"
    ):
        imageroot.stage(base, context_with(tmp_path, script), tmp_path / "upper")


@pytest.mark.root
@pytest.mark.parametrize(
    ("script", "error"),
    [
        ("rm /etc/keep\n", "image-root.sh removed /etc/keep from the base root; it may only add"),
        (
            "rm -r /usr/local/lib && mkdir /usr/local/lib\n",
            "image-root.sh replaced /usr/local/lib of the base root",
        ),
    ],
)
def test_a_script_that_removes_or_replaces_part_of_the_base_is_refused(
    base: Path, tmp_path: Path, script: str, error: str
) -> None:
    with pytest.raises(ImageError, match=error):
        imageroot.stage(base, context_with(tmp_path, script), tmp_path / "upper")


@pytest.mark.root
def test_stage_refuses_a_root_without_python_or_paths_overlayfs_cannot_take(
    base: Path, tmp_path: Path
) -> None:
    context = context_with(tmp_path, STAND_IN)
    odd = tmp_path / "a,b"
    shutil.copytree(base, odd, symlinks=True)
    with pytest.raises(ImageError, match=r"a,b: a comma or colon in the path"):
        imageroot.stage(odd, context, tmp_path / "upper")
    (base / "usr" / "bin" / "python3").unlink()
    with pytest.raises(
        ImageError, match=r"base: no usr/bin/python3 \(tests/fetch-rootfs.sh CACHE bookworm-python"
    ):
        imageroot.stage(base, context, tmp_path / "upper")


def test_stage_needs_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ImageError, match=r"needs root \(overlayfs, chroot\)"):
        imageroot.stage(tmp_path, tmp_path, tmp_path / "upper")


def test_the_layout_is_what_the_script_says(tmp_path: Path) -> None:
    found = imageroot.layout()
    assert found == imageroot.Layout(
        venv="/usr/local/lib/cdictk-venv",
        bundle="/usr/local/share/cdictk/node-runtime",
        init="/usr/local/bin/cdictk-node-setup",
    )
    # Never the node's prefix, where the init container installs the runtime.
    assert not [path for path in (found.venv, found.bundle, found.init) if path.startswith("/opt/cdictk")]
    script = tmp_path / "image-root.sh"
    script.write_text("VENV=/v\nBUNDLE=/b\n")
    with pytest.raises(ImageError, match=r"image-root.sh: no INIT=/PATH line"):
        imageroot.layout(script)


def test_the_base_layer_leaves_out_what_a_runtime_apt_and_dpkg_provide(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name in ("dev/null", "etc/hostname", "etc/passwd-", "etc/passwd", "var/log/dpkg.log", "tmp/x",
                 "var/lib/apt/lists/deb.debian.org_Packages", "var/lib/dpkg/status", "var/lib/dpkg/status-old",
                 ".cdictk-rootfs"):  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    names = [name for name, _ in entries(root, imageroot.BASE_PRUNE)]
    assert names == [
        "dev",
        "etc",
        "etc/passwd",
        "tmp",
        "var",
        "var/lib",
        "var/lib/apt",
        "var/lib/apt/lists",
        "var/lib/dpkg",
        "var/lib/dpkg/status",
        "var/log",
    ]


def test_check_upper_passes_a_tree_of_plain_files(tmp_path: Path) -> None:
    (tmp_path / "usr" / "local").mkdir(parents=True)
    (tmp_path / "usr" / "local" / "file").write_text("x")
    imageroot.check_upper(tmp_path)
    if os.geteuid() == 0:
        os.mknod(tmp_path / "usr" / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))
        with pytest.raises(ImageError, match="removed /usr/whiteout"):
            imageroot.check_upper(tmp_path)
