"""`cdictk runtime configure` end to end on files: one line per file, idempotence, errors, dry run."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from cdictk.cli.main import main

RUNTIME = "/usr/sbin/runc"  # any existing absolute path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["runtime", "configure", "--runtime-path", RUNTIME, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_containerd_drop_in_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    original = '# mine\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause"\n'
    config.write_text(original)
    drop = tmp_path / "conf.d" / "99-cdictk.toml"
    args = ["--runtime", "containerd", "--config", str(config), "--drop-in-config", str(drop)]
    args += ["--enable-cdi", "--set-as-default"]
    code, out, err = run(capsys, *args)
    assert code == 0 and out == ""
    assert err.splitlines()[:2] == [f"{drop}: written", f"{config}: written"]
    assert tomllib.loads(config.read_text())["imports"] == [str(drop)]
    assert (tmp_path / "config.toml.cdictk.orig").read_text() == original
    mtime = config.stat().st_mtime_ns
    code, _, err = run(capsys, *args)
    assert code == 0 and err.splitlines()[:2] == [f"{drop}: unchanged", f"{config}: unchanged"]
    assert config.stat().st_mtime_ns == mtime
    code, _, err = run(
        capsys, "--runtime", "containerd", "--config", str(config), "--drop-in-config", str(drop), "--remove"
    )
    assert code == 0 and config.read_text() == original and not drop.exists()


def test_docker_keeps_the_file_and_merges_features(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "daemon.json"
    config.write_text('{\n  "log-level": "warn",\n  "features": {"buildkit": true}\n}\n')
    code, _, err = run(
        capsys, "--runtime", "docker", "--config", str(config), "--enable-cdi", "--set-as-default"
    )
    assert code == 0 and f"{config}: written" in err
    data = json.loads(config.read_text())
    assert list(data) == ["log-level", "features", "runtimes", "default-runtime"]
    assert data["features"] == {"buildkit": True, "cdi": True}
    assert data["runtimes"] == {"cdictk": {"path": RUNTIME}}


def test_dry_run_prints_a_diff_and_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    code, out, _ = run(capsys, "--runtime", "docker", "--config", str(config), "--dry-run")
    assert code == 0 and out.startswith(f"--- /dev/null\n+++ {config}\n") and '+    "runtimes": {' in out
    assert not config.exists()


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("bad.toml", [], "config.toml:1:8: invalid TOML"),
        ("link.toml", [], "is a symlink; refusing to replace it"),
        (
            None,
            ["--runtime", "docker", "--drop-in-config", "/x.json"],
            "--drop-in-config: docker has no drop-in configs",
        ),
        (None, ["--runtime", "crio", "--enable-cdi"], "CRI-O has CDI on by default"),
        (None, ["--runtime-path", "relative"], "--runtime-path: must be an absolute path"),
        (None, ["--restart", "signal"], "containerd does not reload its config on a signal"),
    ],
)
def test_errors_are_one_line_and_leave_files_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, setup: str | None, args: list[str], message: str
) -> None:
    config = tmp_path / "config.toml"
    if setup == "bad.toml":
        config.write_text("[plugins\n")
    elif setup == "link.toml":
        (tmp_path / "real.toml").write_text("version = 2\n")
        config.symlink_to(tmp_path / "real.toml")
    before = sorted(os.listdir(tmp_path))
    contents = {name: (tmp_path / name).read_bytes() for name in before if (tmp_path / name).is_file()}
    drop_in = str(tmp_path / "d.toml")
    # --runtime containerd first: a --runtime in args comes later and wins.
    code, _, err = run(
        capsys, "--runtime", "containerd", "--config", str(config), "--drop-in-config", drop_in, *args
    )
    assert code == 1 and message in err
    assert err.count("cdictk: error:") == 1
    assert sorted(os.listdir(tmp_path)) == before
    assert {name: (tmp_path / name).read_bytes() for name in contents} == contents


def test_follow_symlinks_edits_the_target(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "real.toml").write_text("version = 2\n")
    (tmp_path / "config.toml").symlink_to(tmp_path / "real.toml")
    code, _, _ = run(
        capsys,
        "--runtime",
        "containerd",
        "--config",
        str(tmp_path / "config.toml"),
        "--drop-in-config",
        str(tmp_path / "d.toml"),
        "--follow-symlinks",
    )
    assert code == 0 and (tmp_path / "config.toml").is_symlink()
    assert "imports" in (tmp_path / "real.toml").read_text()


def test_read_only_directory_leaves_the_file_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "ro"
    target.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(target)], check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN) to make a read-only directory")
    try:
        (target / "daemon.json").write_text('{"debug": true}\n')
        subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        code, _, err = run(capsys, "--runtime", "docker", "--config", str(target / "daemon.json"))
        assert code == 1 and err.count("\n") == 1 and "Read-only file system" in err
        assert (target / "daemon.json").read_text() == '{"debug": true}\n'
        assert os.listdir(target) == ["daemon.json"]
    finally:
        subprocess.run(["umount", str(target)], check=True)
