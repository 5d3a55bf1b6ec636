"""nodeimage/lockfile.py: the repository's lock pins every requirement of cdictk[kubernetes] at a
version pyproject.toml allows, with a hash for every wheel; the lock's text parses back to what was
rendered; resolving for two machines merges into one pin per distribution."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from nodeimage import ImageError, lockfile
from nodeimage.lockfile import Pin
from tests import REPO

LOCK = REPO / "deploy" / "kubernetes" / "requirements.lock"
DIGEST_A, DIGEST_B = "a" * 64, "b" * 64


def test_the_repositorys_lock_pins_what_pyproject_asks_for() -> None:
    pins = {pin.name: pin for pin in lockfile.parse(LOCK.read_text())}
    for text in lockfile.requirements(REPO / "pyproject.toml"):
        requirement = Requirement(text)
        pin = pins.get(lockfile.canonical_name(requirement.name))
        assert pin is not None, f"{requirement.name} is not in the lock: python -m nodeimage lock"
        assert requirement.specifier.contains(pin.version), f"{pin.name}=={pin.version} is not {requirement}"
    assert "grpcio" in pins  # the kubernetes extra
    assert "cdictk" not in pins  # built from the clone, never pinned
    assert all(pin.hashes for pin in pins.values())
    # Written by the command, not by hand: rendering what it parses gives the same text.
    assert lockfile.render(pins.values()) == LOCK.read_text()


def test_parse_reads_back_what_render_wrote() -> None:
    pins = [Pin("zeta", "1.0", (DIGEST_B, DIGEST_A)), Pin("alpha-beta", "2.0.1", (DIGEST_A,))]
    text = lockfile.render(pins)
    assert text.startswith(lockfile.HEADER)
    assert "alpha-beta==2.0.1 \\\n    --hash=sha256:" + DIGEST_A in text
    assert lockfile.parse(text) == [
        Pin("alpha-beta", "2.0.1", (DIGEST_A,)),
        Pin("zeta", "1.0", (DIGEST_A, DIGEST_B)),
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("click==8.1\n", r"logical line 1: want NAME==VERSION --hash=sha256:HEX"),
        ("click>=8.1 --hash=sha256:" + DIGEST_A + "\n", "logical line 1"),
        ("# comment\nclick==8.1 --hash=md5:abc\n", "logical line 2"),
        (f"Click==8.1 --hash=sha256:{DIGEST_A}\nclick==8.2 --hash=sha256:{DIGEST_B}\n", "click pinned twice"),
    ],
)
def test_a_line_that_is_not_a_hashed_pin_is_refused(text: str, error: str) -> None:
    with pytest.raises(ImageError, match=error):
        lockfile.parse(text)


def test_platforms_are_the_manylinux_tags_debian_12s_glibc_loads() -> None:
    x86 = lockfile.platforms("x86_64")
    assert {
        "manylinux1_x86_64",
        "manylinux2014_x86_64",
        "manylinux_2_28_x86_64",
        "manylinux_2_36_x86_64",
    } <= set(x86)
    assert "manylinux_2_37_x86_64" not in x86
    arm = lockfile.platforms("aarch64")
    assert arm[0] == "manylinux2014_aarch64"
    assert "manylinux_2_17_aarch64" in arm
    assert not [tag for tag in arm if "x86_64" in tag or tag.startswith("manylinux1")]
    with pytest.raises(ImageError, match="riscv64: the image is built for x86_64, aarch64 only"):
        lockfile.platforms("riscv64")


def test_merge_keeps_every_machines_hash_and_refuses_two_versions() -> None:
    merged = lockfile.merge(
        [
            [Pin("grpcio", "1.0", (DIGEST_B,)), Pin("click", "8.0", (DIGEST_A,))],
            [Pin("grpcio", "1.0", (DIGEST_A,)), Pin("click", "8.0", (DIGEST_A,))],
        ]
    )
    assert merged == [Pin("click", "8.0", (DIGEST_A,)), Pin("grpcio", "1.0", (DIGEST_A, DIGEST_B))]
    with pytest.raises(ImageError, match=r"grpcio: 1.0 on one machine, 1.1 on another"):
        lockfile.merge([[Pin("grpcio", "1.0", (DIGEST_A,))], [Pin("grpcio", "1.1", (DIGEST_B,))]])


def test_resolve_reads_pips_report_for_the_image_and_nothing_of_this_machines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []

    def pip(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(command)
        report = Path(command[command.index("--report") + 1])
        install = [
            {
                "metadata": {"name": "PyYAML", "version": "6.0.4"},
                "download_info": {"archive_info": {"hashes": {"sha256": DIGEST_A}}},
            }
        ]
        report.write_text(json.dumps({"install": install}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip)
    assert lockfile.resolve(["PyYAML>=6"], "aarch64") == [Pin("pyyaml", "6.0.4", (DIGEST_A,))]
    (command,) = seen
    # PyPI alone (no mirror, constraint or find-links of this machine), wheels for the image only.
    assert command[3:5] == ["--isolated", "install"]
    assert "--dry-run" in command
    assert "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == lockfile.PYTHON_VERSION
    assert "manylinux_2_36_aarch64" in command
    assert command[-1] == "PyYAML>=6"


def test_a_failed_pip_or_a_wheel_without_a_hash_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "Collecting x\nERROR: No matching distribution\n")

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(
        ImageError, match=r"^pip resolving for x86_64 failed: ERROR: No matching distribution$"
    ):
        lockfile.resolve(["x"], "x86_64")

    def unhashed(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        item = {"metadata": {"name": "x", "version": "1"}, "download_info": {"url": "file:///x"}}
        Path(command[command.index("--report") + 1]).write_text(json.dumps({"install": [item]}))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", unhashed)
    with pytest.raises(ImageError, match="x: PyPI gave no sha256 for its wheel"):
        lockfile.resolve(["x"], "x86_64")


def test_download_asks_pip_for_the_locks_wheels_by_hash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[list[str]] = []

    def pip(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip)
    lockfile.download(LOCK, tmp_path / "wheels", "x86_64")
    (command,) = seen
    assert command[3] == "download"
    assert {"--no-deps", "--require-hashes", "--only-binary=:all:"} <= set(command)
    assert command[-2:] == ["--requirement", str(LOCK)]
    assert (tmp_path / "wheels").is_dir()


def test_wheel_hash_is_the_files_sha256(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    assert lockfile.wheel_hash(wheel) == hashlib.sha256(b"wheel").hexdigest()


def test_from_cache_takes_one_wheel_per_pin_for_the_machine_by_hash(tmp_path: Path) -> None:
    wheels = {
        "click-8-py3-none-any.whl": b"click",
        "grpcio-1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl": b"grpcio arm",
        "grpcio-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl": b"grpcio x86",
        "click-7-py3-none-any.whl": b"an older lock's",
    }
    for name, data in wheels.items():
        (tmp_path / name).write_bytes(data)

    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    pins = [
        Pin("click", "8", (digest(b"click"),)),
        Pin("grpcio", "1", (digest(b"grpcio arm"), digest(b"grpcio x86"))),
    ]
    found = lockfile.from_cache(pins, tmp_path, "x86_64")
    assert found == [
        tmp_path / "click-8-py3-none-any.whl",
        tmp_path / next(n for n in wheels if "x86_64" in n),
    ]
    arm = lockfile.from_cache(pins, tmp_path, "aarch64")
    assert arm is not None and "aarch64" in arm[1].name
    (tmp_path / "click-8-py3-none-any.whl").unlink()
    assert lockfile.from_cache(pins, tmp_path, "x86_64") is None
