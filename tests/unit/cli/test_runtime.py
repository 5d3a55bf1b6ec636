"""`cdictk runtime configure` end to end on files: one line per file, idempotence, errors, dry run."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.cli.runtime import console_script
from cdictk.runtime import launchers

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
    code, _, err = run(capsys, *args[:6], "--remove", "--enable-cdi")
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
        ("bad.toml", [], "config.toml:1:9: invalid TOML"),
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


@pytest.mark.root
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


def test_drop_in_that_is_the_main_config_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("version = 2\n")
    code, _, err = run(
        capsys, "--runtime", "containerd", "--config", str(config), "--drop-in-config", str(config)
    )
    assert code == 1 and "is the main config itself" in err and config.read_text() == "version = 2\n"


def test_remove_on_missing_configs_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for engine in ("containerd", "crio", "docker"):
        config = tmp_path / engine / "config"
        extra = [] if engine == "docker" else ["--drop-in-config", str(tmp_path / engine / "d.toml")]
        code, _, _ = run(capsys, "--runtime", engine, "--config", str(config), *extra, "--remove")
        assert code == 0
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_new_file_is_backed_up_as_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    run(capsys, "--runtime", "docker", "--config", str(config))
    run(capsys, "--runtime", "docker", "--config", str(config), "--runtime-name", "other")
    assert (tmp_path / "daemon.json.cdictk.orig").read_text() == ""


def test_dry_run_and_refused_paths_create_no_directories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, _ = run(
        capsys, "--runtime", "docker", "--config", str(tmp_path / "no" / "dir" / "daemon.json"), "--dry-run"
    )
    assert code == 0 and not (tmp_path / "no").exists()
    code, _, err = run(capsys, "--runtime", "docker", "--config", "relative/daemon.json")
    assert code == 1 and "must be an absolute path" in err and not os.path.exists("relative")


def test_diff_of_a_file_without_a_final_newline_applies_with_patch(tmp_path: Path) -> None:
    from cdictk.configure.writer import diff

    old, new = '{"a": 1}', '{"a": 1, "b": 2}'
    (tmp_path / "f.json").write_text(old)
    patch = diff(str(tmp_path / "f.json"), old, new)
    assert "\\ No newline at end of file" in patch
    applied = subprocess.run(
        ["patch", "-p0", "-s"], input=patch, text=True, cwd="/", capture_output=True, check=False
    )
    if applied.returncode == 127:
        pytest.skip("patch(1) is not installed")
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "f.json").read_text() == new


def test_docker_remove_restores_what_configure_replaced(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "daemon.json"
    original = '{\n  "default-runtime": "nvidia",\n  "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},\n  "features": {"cdi": false}\n}\n'
    config.write_text(original)
    run(capsys, "--runtime", "docker", "--config", str(config), "--set-as-default", "--enable-cdi")
    assert json.loads(config.read_text())["default-runtime"] == "cdictk"
    code, _, _ = run(capsys, "--runtime", "docker", "--config", str(config), "--remove", "--enable-cdi")
    assert code == 0 and json.loads(config.read_text()) == json.loads(original)


def test_a_drop_in_goes_beside_the_config_given(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--config naming a file elsewhere wrote the drop-in into /etc/containerd/conf.d all the same."""
    config = tmp_path / "x" / "config.toml"
    code, _, err = run(capsys, "--runtime", "containerd", "--config", str(config))
    drop = tmp_path / "x" / "conf.d" / "99-cdictk.toml"
    assert code == 0 and err.splitlines()[:2] == [f"{drop}: written", f"{config}: written"]
    assert tomllib.loads(config.read_text())["imports"] == [str(drop)]
    crio = tmp_path / "y" / "crio.conf"
    code, _, err = run(capsys, "--runtime", "crio", "--config", str(crio))
    assert (
        code == 0 and err.splitlines()[0] == f"{tmp_path / 'y' / 'crio.conf.d' / '99-cdictk.toml'}: written"
    )
    chosen, other = tmp_path / "z.toml", tmp_path / "w" / "config.toml"  # told otherwise: that one
    code, _, err = run(
        capsys, "--runtime", "containerd", "--config", str(other), "--drop-in-config", str(chosen)
    )
    assert code == 0 and err.splitlines()[:2] == [f"{chosen}: written", f"{other}: written"]
    assert not (other.parent / "conf.d").exists()


def binary_name(drop_in: Path) -> str:
    runtimes = tomllib.loads(drop_in.read_text())["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    return str(runtimes["runtimes"]["cdictk"]["options"]["BinaryName"])


def test_configure_installs_the_shell_front_and_registers_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default install was the slow one: the console script, which starts Python for every
    container command, unless install-launchers had run first."""
    libexec = tmp_path / "libexec" / "cdictk"
    monkeypatch.setattr(launchers, "DEFAULT_DIR", str(libexec))
    config = tmp_path / "config.toml"
    config.write_text("version = 3\n")
    args = ["runtime", "configure", "--runtime", "containerd", "--config", str(config)]
    front = libexec / "cdictk-runtime"
    assert main([*args, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[0] == (
        f"cdictk: would install the launchers in {libexec}; registering {front}: the shell front, which "
        "starts Python only for a create that may ask for a GPU"
    )
    assert f'BinaryName = "{front}"' in out and not libexec.exists()  # a dry run installs nothing
    assert main(args) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[
        0
    ] == f"cdictk: installed the launchers in {libexec}; registering {front}: the shell front, " + (
        "which starts Python only for a create that may ask for a GPU"
    )
    assert not [line for line in lines[1:] if line.startswith("cdictk:")]  # the one line that says which
    assert binary_name(tmp_path / "conf.d" / "99-cdictk.toml") == str(front)
    assert front.read_text().startswith("#!/bin/sh\n") and (libexec / "cdictk-runtime.py").exists()
    mtime = front.stat().st_mtime_ns
    assert main(args) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"cdictk: registering {front}: the shell front, which starts Python only for a create that may ask "
        "for a GPU"
    )
    assert front.stat().st_mtime_ns == mtime  # there already: not written again


def test_configure_falls_back_to_the_console_script_and_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)  # anyone could plant a launcher here
    monkeypatch.setattr(launchers, "DEFAULT_DIR", str(loose / "cdictk"))
    config = tmp_path / "config.toml"
    config.write_text("version = 3\n")
    args = ["runtime", "configure", "--runtime", "containerd", "--config", str(config)]
    for dry_run in (["--dry-run"], []):
        assert main([*args, *dry_run]) == 0
        line = capsys.readouterr().err.splitlines()[0]
        script = console_script()
        assert line.startswith(
            f"cdictk: registering the console script {script}, which starts Python for every container "
            f"command: the launchers cannot be installed in {loose / 'cdictk'}: "
        ), line
        assert f"{loose}: writable by group or others (mode 0777)" in line
    assert not (loose / "cdictk").exists()
    assert binary_name(tmp_path / "conf.d" / "99-cdictk.toml") == script
