"""Loading the NVIDIA modules: which modprobe runs, how (chroot, environment, timeout), and its failures."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.node import modules
from cdictk.node.modules import LOAD_ORDER, MODPROBE_ENV, MODPROBE_TIMEOUT, load_modules, modprobe_command


def script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def recorder(tmp_path: Path, body: str = "") -> tuple[str, Path]:
    """A fake modprobe that appends its arguments, one call a line, to a log."""
    log = tmp_path / "calls.log"
    return script(tmp_path / "modprobe", f'echo "$*" >> {log}\n{body}'), log


def run(
    program: str, *, timeout: float = MODPROBE_TIMEOUT, dry_run: bool = False
) -> tuple[list[str], list[str], list[str]]:
    warnings: list[str] = []
    said: list[str] = []
    failed = load_modules(warnings.append, said.append, modprobe=program, timeout=timeout, dry_run=dry_run)
    return failed, warnings, said


def test_load_order_and_no_chroot_for_an_explicit_program(tmp_path: Path) -> None:
    program, log = recorder(tmp_path)
    assert modprobe_command("/run/nvidia/driver", program) == [program]
    assert run(program) == ([], [], [])
    assert log.read_text().splitlines() == ["nvidia", "nvidia-uvm", "nvidia-modeset"]
    assert LOAD_ORDER == ("nvidia", "nvidia-uvm", "nvidia-modeset")


def test_a_failing_module_is_a_warning_and_the_others_still_load(tmp_path: Path) -> None:
    program, log = recorder(
        tmp_path,
        '[ "$1" = nvidia-uvm ] && { echo "modprobe: FATAL: Module nvidia-uvm not found." >&2; exit 1; }\nexit 0',
    )
    failed, warnings, _ = run(program)
    assert failed == ["nvidia-uvm"]
    assert warnings == [f"{program} nvidia-uvm: exit status 1: modprobe: FATAL: Module nvidia-uvm not found."]
    assert log.read_text().splitlines() == list(LOAD_ORDER)


def test_the_environment_is_fixed_and_minimal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    monkeypatch.setenv("CDICTK_TEST_SECRET", "x")
    env_file = tmp_path / "env"
    program = script(tmp_path / "modprobe", f"env > {env_file}")
    assert run(program)[0] == []
    seen = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert "LD_PRELOAD" not in seen and "CDICTK_TEST_SECRET" not in seen
    assert seen["PATH"] == MODPROBE_ENV["PATH"] and seen["LC_ALL"] == "C"


def test_timeout_missing_program_and_signal(tmp_path: Path) -> None:
    slow = script(tmp_path / "slow", "exec sleep 30")
    failed, warnings, _ = run(slow, timeout=0.2)
    assert failed == list(LOAD_ORDER)
    assert warnings[0] == f"{slow} nvidia: timed out after 0.2 s"
    missing = str(tmp_path / "missing")
    _, warnings, _ = run(missing)
    assert warnings[0] == f"{missing} nvidia: cannot run: No such file or directory"
    killed = script(tmp_path / "killed", "kill -9 $$")
    _, warnings, _ = run(killed)
    assert warnings[0] == f"{killed} nvidia: signal 9"


def test_dry_run_runs_nothing(tmp_path: Path) -> None:
    program, log = recorder(tmp_path)
    assert run(program, dry_run=True) == ([], [], [f"would run {program} {name}" for name in LOAD_ORDER])
    assert not log.exists()


def make_root(root: Path, *, merged_usr: bool) -> None:
    (root / "usr/sbin").mkdir(parents=True)
    script(root / "usr/sbin/modprobe", "exit 0")
    if merged_usr:
        os.symlink("usr/sbin", root / "sbin")  # Debian's merged /usr: /sbin -> usr/sbin
    else:
        (root / "sbin").mkdir()
        os.symlink("/usr/sbin/modprobe", root / "sbin/modprobe")  # absolute: inside the root


@pytest.mark.parametrize("merged_usr", [True, False])
def test_a_driver_root_runs_its_own_modprobe_under_chroot(tmp_path: Path, merged_usr: bool) -> None:
    make_root(tmp_path, merged_usr=merged_usr)
    command = modprobe_command(str(tmp_path))
    assert isinstance(command, list)
    assert command[1:] == [str(tmp_path), "/sbin/modprobe"]
    assert command[0] in modules.CHROOT_PATHS and os.access(command[0], os.X_OK)


def test_a_driver_root_without_modprobe(tmp_path: Path) -> None:
    (tmp_path / "sbin").mkdir()
    (tmp_path / "sbin/modprobe").write_text("not executable")
    assert modprobe_command(str(tmp_path)) == (
        f"no /sbin/modprobe or /usr/sbin/modprobe in the driver root {tmp_path}"
    )
    warnings: list[str] = []
    assert load_modules(warnings.append, print, driver_root=str(tmp_path)) == list(LOAD_ORDER)
    assert warnings == [
        f"kernel modules not loaded: no /sbin/modprobe or /usr/sbin/modprobe in the driver root {tmp_path}"
    ]


def test_the_host_modprobe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = script(tmp_path / "usr-sbin-modprobe", "exit 0")
    monkeypatch.setattr(modules, "MODPROBE_PATHS", (str(tmp_path / "sbin-modprobe"), found))
    assert modprobe_command("/") == [found]
    assert modprobe_command("/usr/..") == [found]
    os.chmod(found, stat.S_IRUSR)
    assert modprobe_command("/") == f"no {tmp_path}/sbin-modprobe or {found} on this host"
