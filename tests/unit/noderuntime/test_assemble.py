"""The builder's parts that run here (the whole build runs in the image's own Python, in a chroot:
tests/e2e/test_node_runtime.py), and its command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.bundlepaths import ENTRIES
from cdictk.noderuntime import assemble
from cdictk.noderuntime.assemble import COMPILE, ENTRY, BuildError, build


def test_each_entry_script_runs_its_modules_main_with_the_runtimes_packages(tmp_path: Path) -> None:
    for name, module in ENTRIES.items():
        text = ENTRY.format(name=name, module=module, version="python3.11")
        compile(text, name, "exec")
        assert f"from {module} import main\n" in text
        assert 'sys.path.append(sys.prefix + "/lib/python3.11/site-packages")' in text
    # A script, run as the launcher runs it (-I -S), finds the packages under its own sys.prefix.
    site = tmp_path / "lib" / "python3.11" / "site-packages" / "probe"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("def main(argv):\n    print('main', argv)\n    return 3\n")
    script = tmp_path / "entry.py"
    script.write_text(
        ENTRY.format(name="probe", module="probe", version="python3.11").replace(
            "sys.prefix", repr(str(tmp_path))
        )
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(script), "a", "b"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (3, "main ['a', 'b']\n")


def test_the_compile_step_writes_unchecked_hash_bytecode_without_this_machines_paths(tmp_path: Path) -> None:
    library = tmp_path / "lib" / "python3.11"
    library.mkdir(parents=True)
    (library / "mod.py").write_text("X = {'a', 'b', 'c'}\n")
    done = subprocess.run(
        [sys.executable, "-B", "-S", "-c", COMPILE, str(tmp_path), "lib/python3.11"], check=False
    )
    assert done.returncode == 0
    pyc = next((library / "__pycache__").glob("mod.*.pyc")).read_bytes()
    assert pyc[4:8] == b"\x01\x00\x00\x00"  # hash-based, not checked against the source
    assert str(tmp_path).encode() not in pyc and b"lib/python3.11/mod.py" in pyc


def test_modes_and_times_are_made_the_same_whatever_this_machine_made(tmp_path: Path) -> None:
    for path in (
        "bin/cdictk",
        "libexec/python3",
        "libexec/ldconfig",
        "lib/ld-linux-x86-64.so.2",
        "lib/libc.so.6",
    ):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("")
        (tmp_path / path).chmod(0o600)
    (tmp_path / "lib").chmod(0o700)
    assemble._normalize(str(tmp_path))
    modes = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o7777 for p in tmp_path.rglob("*")}
    assert modes == {
        "bin": 0o755, "bin/cdictk": 0o755, "libexec": 0o755, "libexec/python3": 0o755, "libexec/ldconfig": 0o755,
        "lib": 0o755, "lib/ld-linux-x86-64.so.2": 0o755, "lib/libc.so.6": 0o644,
    }  # fmt: skip
    assert {p.stat().st_mtime for p in tmp_path.rglob("*")} == {0}


def test_an_output_that_exists_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="exists already; remove it or name another"):
        build(str(tmp_path), "/bin/true")


def test_the_images_ldconfig_must_be_static(monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.path.isfile("/sbin/ldconfig"):
        pytest.skip("no /sbin/ldconfig here")
    from cdictk.elfdso import FLAG_AARCH64_LIB64, FLAG_X8664_LIB64

    assert assemble._ldconfig(FLAG_X8664_LIB64).endswith("ldconfig")
    with pytest.raises(BuildError, match="not a static program of this machine"):
        assemble._ldconfig(FLAG_AARCH64_LIB64)


def noderuntime(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdictk.noderuntime", *args], capture_output=True, text=True, check=False
    )


def test_the_command_line(tmp_path: Path) -> None:
    done = noderuntime("build", "--output", str(tmp_path), "--launcher", "/bin/true")
    assert done.returncode == 1
    assert (
        done.stderr
        == f"python -m cdictk.noderuntime build: error: {tmp_path}: exists already; remove it or name another\n"
    )
    done = noderuntime("launcher", "--output", str(tmp_path / "launcher"), "--cc", "no-such-cc")
    assert done.returncode == 1 and "no-such-cc: not found" in done.stderr
    done = noderuntime("build")
    assert done.returncode == 2 and "--output" in done.stderr
    assert "Build cdictk's node runtime" in noderuntime("--help").stdout
