"""The builder's parts that run here (the whole build runs in the image's own Python, in a chroot:
tests/e2e/test_node_runtime.py), and its command line."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.bundlelayout import ENTRIES
from cdictk.noderuntime import assemble, manifest
from cdictk.noderuntime.assemble import COMPILE, ENTRY, BuildError, build
from cdictk.noderuntime.closure import Closure


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
    from cdictk.startpath.helpers.elfdso import FLAG_AARCH64_LIB64, FLAG_X8664_LIB64

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


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """build() with this Python's files but neither its libraries' closure nor a run of the new tree
    (this venv's interpreter is no image's: its libpython has an absolute run path): a loader, a C
    library and an ldconfig of stand-in bytes; the commands it would run, recorded."""
    stand_ins = tmp_path / "stand-ins"
    stand_ins.mkdir()
    for name in ("ld-linux-x86-64.so.2", "libc.so.6", "ldconfig", "launcher"):
        (stand_ins / name).write_bytes(name.encode())
    ran: list[list[str]] = []
    found = Closure(
        str(stand_ins / "ld-linux-x86-64.so.2"),
        "ld-linux-x86-64.so.2",
        {"libc.so.6": str(stand_ins / "libc.so.6")},
    )
    monkeypatch.setattr(assemble, "closure", lambda *args, **kwargs: found)
    monkeypatch.setattr(assemble, "check_launcher", lambda path, arch: None)
    monkeypatch.setattr(assemble, "_ldconfig", lambda arch: str(stand_ins / "ldconfig"))
    monkeypatch.setattr(assemble, "_run", lambda work, command, what: ran.append(command))
    monkeypatch.setattr(assemble, "distributions", lambda: [importlib.metadata.distribution("cdictk")])
    return ran


def test_a_build_lays_out_the_tree_and_its_manifest(stubbed: list[list[str]], tmp_path: Path) -> None:
    output = tmp_path / "runtime"
    built = build(str(output), str(tmp_path / "stand-ins" / "launcher"))
    assert built.path == str(output) and built.size > 1 << 20
    text, entries = manifest.read(str(output))
    assert manifest.runtime_id(text) == built.runtime_id
    assert manifest.mismatch(str(output), entries) is None
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    kinds = {entry.path: (entry.kind, entry.mode) for entry in entries}
    assert kinds["bin/cdictk"] == ("f", 0o755)
    assert {kinds[f"bin/{name}"] for name in ("cdictk-hook", "cdictk-runtime", "python3")} == {("h", 0o755)}
    assert (
        kinds["libexec/python3"]
        == kinds["libexec/ldconfig"]
        == kinds["lib/ld-linux-x86-64.so.2"]
        == ("f", 0o755)
    )
    assert kinds["lib/libc.so.6"] == kinds[f"lib/{version}/os.py"] == ("f", 0o644)
    assert kinds[f"lib/{version}/site-packages/cdictk/startpath/hooks/entry.py"] == ("f", 0o644)
    assert (
        f"lib/{version}/tkinter/__init__.py" not in kinds and f"lib/{version}/unittest/case.py" not in kinds
    )
    assert (output / "libexec" / "cdictk-hook.py").read_text() == ENTRY.format(
        name="cdictk-hook", module="cdictk.startpath.hooks.entry", version=version
    )
    assert "cdictk.noderuntime.selftest" in (output / "libexec" / "selftest.py").read_text()
    assert [command[1:3] for command in stubbed] == [["-B", "-S"], ["-B", "-I"]]  # compiled, then tested
    assert sorted(os.listdir(tmp_path)) == ["runtime", "stand-ins"]  # no work directory left


def test_a_build_whose_self_test_fails_leaves_nothing(
    stubbed: list[list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def fail(work: str, command: list[str], what: str) -> None:
        raise BuildError(f"{what} in the new runtime failed (status 1): cannot import _ctypes")

    monkeypatch.setattr(assemble, "_run", fail)
    with pytest.raises(BuildError, match="cannot import _ctypes"):
        build(str(tmp_path / "runtime"), str(tmp_path / "stand-ins" / "launcher"))
    assert sorted(os.listdir(tmp_path)) == ["stand-ins"]


def test_the_command_in_process(
    stubbed: list[list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cdictk.noderuntime.__main__ import main

    assert (
        main(
            [
                "build",
                "--output",
                str(tmp_path / "runtime"),
                "--launcher",
                str(tmp_path / "stand-ins/launcher"),
            ]
        )
        == 0
    )
    path, runtime_id, size = capsys.readouterr().out.split()
    assert path == str(tmp_path / "runtime") and len(runtime_id) == 16 and int(size) > 0
    assert main(["build", "--output", str(tmp_path / "runtime"), "--launcher", "x"]) == 1
    assert "exists already" in capsys.readouterr().err
    assert main(["launcher", "--output", str(tmp_path / "launcher"), "--cc", "no-such-cc"]) == 1
    assert "no-such-cc: not found" in capsys.readouterr().err
