"""The static launcher: compiled here, and run in a tree whose "loader" is a script that prints what it
was given, so that the command line the launcher builds is read back exactly."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cdictk.noderuntime.launcher import LauncherError, check_launcher, compile_launcher
from cdictk.startpath.helpers.elfdso import FLAG_AARCH64_LIB64, FLAG_X8664_LIB64

LOADER = "ld-linux-x86-64.so.2"
# The stand-in loader: its arguments one a line, then the LD_ variables it was left.
FAKE_LOADER = """#!/bin/sh
for arg do echo "$arg"; done
env | grep '^LD_' | sort
"""


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    out = tmp_path_factory.mktemp("launcher") / "launcher"
    try:
        compile_launcher(str(out))
    except LauncherError as exc:
        pytest.skip(f"{exc}")
    return out


def version(root: Path, launcher: Path, names: tuple[str, ...] = ("python3", "cdictk-hook")) -> Path:
    """A runtime's tree, as far as the launcher looks at it."""
    for directory in ("bin", "lib", "libexec"):
        (root / directory).mkdir(parents=True)
    shutil.copy2(launcher, root / "bin" / names[0])
    for name in names[1:]:
        os.link(root / "bin" / names[0], root / "bin" / name)
    (root / "lib" / LOADER).write_text(FAKE_LOADER)
    (root / "lib" / LOADER).chmod(0o755)
    (root / "libexec" / "cdictk-hook.py").write_text("")
    return root


def launch(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, env=env or {"PATH": "/usr/bin:/bin"}, check=False
    )


def test_it_is_a_static_program_of_this_machine(launcher: Path) -> None:
    check_launcher(str(launcher), FLAG_X8664_LIB64)
    with pytest.raises(LauncherError, match="another architecture"):
        check_launcher(str(launcher), FLAG_AARCH64_LIB64)


def test_a_name_runs_its_script_with_the_interpreter_isolated(launcher: Path, tmp_path: Path) -> None:
    root = version(tmp_path / "v1", launcher)
    done = launch(root / "bin" / "cdictk-hook", "batch", "--folder", "/usr/lib", env={"LD_PRELOAD": "/x.so"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "--library-path", f"{root}/lib", "--inhibit-cache", "--argv0", f"{root}/bin/python3",
        f"{root}/libexec/python3", "-I", "-S", f"{root}/libexec/cdictk-hook.py", "batch", "--folder", "/usr/lib",
    ]  # fmt: skip
    # LD_PRELOAD (a library built for the node's own C library) was dropped


def test_python3_runs_the_interpreter_with_the_arguments_as_given(launcher: Path, tmp_path: Path) -> None:
    root = version(tmp_path / "v1", launcher)
    done = launch(root / "bin" / "python3", "-c", "pass")
    assert done.stdout.splitlines()[5:] == [f"{root}/libexec/python3", "-c", "pass"]


def test_through_a_link_it_runs_the_version_the_link_led_to(launcher: Path, tmp_path: Path) -> None:
    """P/current -> versions/ID, and P/bin/NAME -> ../current/bin/NAME: the root is the version's, so a
    launcher started while current is swapped uses one version throughout."""
    prefix = tmp_path / "prefix"
    root = version(prefix / "versions" / "abc", launcher)
    (prefix / "current").symlink_to("versions/abc")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "cdictk-hook").symlink_to("../current/bin/cdictk-hook")
    done = launch(prefix / "bin" / "cdictk-hook")
    assert done.stdout.splitlines()[1] == f"{root}/lib"
    assert done.stdout.splitlines()[8] == f"{root}/libexec/cdictk-hook.py"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("no-script", "libexec/cdictk-precreate.py: No such file or directory"),
        ("no-loader", f"lib/{LOADER}: No such file or directory"),
        ("not-in-bin", "the launcher is not in the runtime's bin directory"),
        ("colon", "holds ':' or ';'"),
    ],
)
def test_what_cannot_run_is_one_line_and_127(
    launcher: Path, tmp_path: Path, setup: str, expected: str
) -> None:
    root = version(
        tmp_path / ("v:1" if setup == "colon" else "v1"), launcher, ("python3", "cdictk-precreate")
    )
    (root / "libexec" / "cdictk-precreate.py").write_text("")
    program = root / "bin" / "cdictk-precreate"
    if setup == "no-script":
        (root / "libexec" / "cdictk-precreate.py").unlink()
    elif setup == "no-loader":
        (root / "lib" / LOADER).unlink()
    elif setup == "not-in-bin":
        (root / "sbin").mkdir()
        os.link(program, root / "sbin" / "cdictk-precreate")
        program = root / "sbin" / "cdictk-precreate"
    done = launch(program)
    assert done.returncode == 127
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("cdictk-launcher: ") and expected in done.stderr


def test_what_is_no_static_launcher_is_refused(tmp_path: Path) -> None:
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(LauncherError, match="not an ELF program"):
        check_launcher(str(tmp_path / "script"), FLAG_X8664_LIB64)
    dynamic = shutil.which("env") or "/usr/bin/env"
    with pytest.raises(LauncherError, match="dynamically linked"):
        check_launcher(dynamic, FLAG_X8664_LIB64)


def test_a_missing_compiler_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="no-such-cc: not found"):
        compile_launcher(str(tmp_path / "launcher"), cc="no-such-cc")
    assert not (tmp_path / "launcher").exists()
