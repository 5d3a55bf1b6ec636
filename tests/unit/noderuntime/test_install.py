"""The runtime on a node: installed under a prefix, versions swapped after their self-test, older ones
removed, the stable paths in PREFIX/bin, and uninstalled. The runtimes here are small trees whose
launcher is a shell script (tests/fakeruntime.py): the self-test is what that script answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.noderuntime.install import InstallError, Target, install, uninstall
from tests.fakeruntime import fake_runtime, host_root, id_of

STABLE_LINKS = ("cdictk", "cdictk-precreate", "nvidia-container-runtime-hook")


def versions(prefix: Path) -> list[str]:
    return sorted(path.name for path in (prefix / "versions").iterdir())


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    return tmp_path / "opt" / "cdictk"


def test_the_layout_of_an_install(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    said: list[str] = []
    installed = install(str(runtime), Target(str(prefix), "", str(host_root(tmp_path / "host"))), said.append)
    assert (installed.runtime_id, installed.copied, installed.replaced) == (id_of(runtime), True, None)
    assert installed.path == f"{prefix}/versions/{installed.runtime_id}"
    assert os.readlink(prefix / "current") == f"versions/{installed.runtime_id}"
    assert versions(prefix) == [installed.runtime_id]
    for name in STABLE_LINKS:
        assert os.readlink(prefix / "bin" / name) == f"../current/bin/{name}"
    front = (prefix / "bin" / "cdictk-runtime").read_text()
    assert front.startswith("#!/bin/sh\n# Written by `cdictk system install-runtime`")
    assert f"python='{prefix}/current/bin/cdictk-runtime'" in front
    version = prefix / "versions" / installed.runtime_id
    assert (version / "bin" / "cdictk-hook").stat().st_ino == (version / "bin" / "python3").stat().st_ino
    assert (version / "MANIFEST").read_bytes() == (runtime / "MANIFEST").read_bytes()
    assert (prefix / ".made").read_text() == "2\n"  # opt and opt/cdictk
    assert said == []


def test_installing_it_again_changes_nothing(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    first = install(str(runtime), target)
    links = {name: os.lstat(prefix / "bin" / name).st_ino for name in STABLE_LINKS}
    current = os.lstat(prefix / "current").st_ino
    again = install(str(runtime), target)
    assert (again.runtime_id, again.copied, again.replaced) == (first.runtime_id, False, None)
    assert {name: os.lstat(prefix / "bin" / name).st_ino for name in STABLE_LINKS} == links
    assert os.lstat(prefix / "current").st_ino == current
    assert versions(prefix) == [first.runtime_id]


def test_the_version_before_stays_and_older_ones_go(tmp_path: Path, prefix: Path) -> None:
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    a, b, c = (fake_runtime(tmp_path / mark, mark) for mark in "abc")
    said: list[str] = []
    for runtime in (a, b, c):
        install(str(runtime), target, said.append)
    assert versions(prefix) == sorted([id_of(b), id_of(c)])
    assert said == [f"{prefix}/versions/{id_of(a)}: removed (an older version)"]
    back = install(str(a), target)  # a roll back: copied again, c kept as the one before
    assert (back.copied, back.replaced) == (True, id_of(c))
    assert versions(prefix) == sorted([id_of(a), id_of(c)])
    assert os.readlink(prefix / "current") == f"versions/{id_of(a)}"


def test_a_version_that_does_not_run_never_becomes_current(tmp_path: Path, prefix: Path) -> None:
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    good = install(str(fake_runtime(tmp_path / "good", "good")), target)
    broken = fake_runtime(tmp_path / "broken", "broken", fails=True)
    with pytest.raises(
        InstallError, match=r"cdictk-hook --help: the new runtime does not run here \(status 3\): boom"
    ):
        install(str(broken), target)
    assert os.readlink(prefix / "current") == f"versions/{good.runtime_id}"
    assert versions(prefix) == [good.runtime_id]  # nor is it left half-installed


def test_what_an_interrupted_install_left_is_swept(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    install(str(runtime), target)
    (prefix / "versions" / ".0123456789abcdef.tmp-1a2b3c4d" / "lib").mkdir(parents=True)
    (prefix / "current.tmp-1a2b3c4d").symlink_to("versions/0123456789abcdef")
    (prefix / "bin" / "cdictk-runtime.tmp-1a2b3c4d").write_text("#!/bin/sh\n")
    install(str(runtime), target)  # the same version: nothing else changes
    left = sorted(str(path.relative_to(prefix)) for path in prefix.rglob("*") if ".tmp-" in str(path))
    assert left == []


def test_a_damaged_version_is_installed_again(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    first = install(str(runtime), target)
    (prefix / "versions" / first.runtime_id / "lib" / "libc.so.6").write_text("damaged")
    said: list[str] = []
    again = install(str(runtime), target, said.append)
    assert again.copied and (prefix / "versions" / first.runtime_id / "lib" / "libc.so.6").read_text() == "v1"
    assert said == [
        f"{prefix}/versions/{first.runtime_id}/lib/libc.so.6: differs from the manifest; installed again"
    ]


def test_a_runtime_not_as_its_manifest_says_is_refused(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    (runtime / "lib" / "extra.so").write_text("")
    with pytest.raises(InstallError, match=r"not as its manifest says: .*lib/extra\.so: not in the manifest"):
        install(str(runtime), Target(str(prefix)))
    (runtime / "MANIFEST").unlink()
    with pytest.raises(InstallError, match=r"not a node runtime: .*MANIFEST: No such file"):
        install(str(runtime), Target(str(prefix)))
    assert not prefix.exists()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (Target("opt/cdictk"), "--prefix: 'opt/cdictk': must be an absolute, normalised path"),
        (Target("/opt/cdictk/"), "must be an absolute, normalised path"),
        (Target("/opt/cd:ictk"), "--prefix: '/opt/cd:ictk': a directory of plain characters, not /"),
        (Target("/"), "a directory of plain characters, not /"),
        (Target("/opt/cdictk", "relative"), "--target: 'relative'"),
        (Target("/opt/cdictk", "", "host"), "--host-root: 'host'"),
    ],
)
def test_targets_refused(tmp_path: Path, target: Target, expected: str) -> None:
    with pytest.raises(InstallError, match=expected):
        install(str(fake_runtime(tmp_path / "runtime")), target)


@pytest.mark.root
def test_a_prefix_someone_else_could_change_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    os.chown(base, 65534, 65534)
    with pytest.raises(InstallError, match="owned by uid 65534"):
        install(str(fake_runtime(tmp_path / "runtime")), Target(str(base / "cdictk")))


def test_a_node_without_a_shell_gets_a_link_for_the_shim(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    shell_less = host_root(tmp_path / "host", shell=False)
    install(str(runtime), Target(str(prefix), "", str(shell_less)))
    assert os.readlink(prefix / "bin" / "cdictk-runtime") == "../current/bin/cdictk-runtime"
    host_root(tmp_path / "later")  # the node has a shell now: the front replaces the link
    install(str(runtime), Target(str(prefix), "", str(tmp_path / "later")))
    assert (prefix / "bin" / "cdictk-runtime").read_text().startswith("#!/bin/sh\n")
    install(str(runtime), Target(str(prefix), "", str(shell_less)))  # and back
    assert os.readlink(prefix / "bin" / "cdictk-runtime") == "../current/bin/cdictk-runtime"


def test_a_prefix_mounted_elsewhere_holds_the_nodes_paths(tmp_path: Path) -> None:
    """The DaemonSet's init container: the node's /opt/cdictk at /host-opt-cdictk, its / at /host."""
    here = tmp_path / "host-opt-cdictk"
    here.mkdir()
    node = host_root(tmp_path / "host")
    installed = install(str(fake_runtime(tmp_path / "runtime")), Target("/opt/cdictk", str(here), str(node)))
    assert installed.path == f"/opt/cdictk/versions/{installed.runtime_id}"
    assert os.readlink(here / "current") == f"versions/{installed.runtime_id}"
    assert "python='/opt/cdictk/current/bin/cdictk-runtime'" in (here / "bin" / "cdictk-runtime").read_text()
    assert not (here / ".made").exists()  # the mount point was there


def test_uninstall_leaves_what_it_found(tmp_path: Path, prefix: Path) -> None:
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    (tmp_path / "opt").mkdir()  # the node had /opt; cdictk made /opt/cdictk
    install(str(fake_runtime(tmp_path / "a", "a")), target)
    install(str(fake_runtime(tmp_path / "b", "b")), target)
    assert uninstall(target)
    assert sorted(os.listdir(tmp_path / "opt")) == []
    assert not uninstall(target)


def test_uninstall_removes_the_directories_the_install_made(tmp_path: Path) -> None:
    prefix = tmp_path / "made" / "by" / "cdictk"
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    install(str(fake_runtime(tmp_path / "runtime")), target)
    assert uninstall(target)
    assert not (tmp_path / "made").exists()


def test_uninstall_leaves_a_file_that_is_not_the_runtimes(tmp_path: Path, prefix: Path) -> None:
    target = Target(str(prefix), "", str(host_root(tmp_path / "host")))
    install(str(fake_runtime(tmp_path / "runtime")), target)
    (prefix / "bin" / "mine").write_text("an operator's\n")
    said: list[str] = []
    assert uninstall(target, said.append)
    assert said == [f"{prefix}/bin/mine: not the runtime's; left"]
    assert sorted(str(path.relative_to(prefix)) for path in prefix.rglob("*")) == ["bin", "bin/mine"]


def cdictk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdictk", *args], capture_output=True, text=True, check=False
    )


def test_the_commands(tmp_path: Path, prefix: Path) -> None:
    runtime = fake_runtime(tmp_path / "runtime")
    host = host_root(tmp_path / "host")
    flags = ["--prefix", "/opt/cdictk", "--target", str(prefix), "--host-root", str(host)]
    prefix.mkdir(parents=True)
    done = cdictk("system", "install-runtime", "--bundle", str(runtime), *flags)
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr
        == f"/opt/cdictk/versions/{id_of(runtime)}: node runtime {id_of(runtime)} installed (copied)\n"
    )
    done = cdictk("system", "uninstall-runtime", *flags[:4])
    assert (done.returncode, done.stderr) == (0, f"{prefix}: node runtime removed\n")


def test_the_command_without_a_runtime_to_install(tmp_path: Path) -> None:
    done = cdictk("system", "install-runtime", "--prefix", str(tmp_path / "cdictk"))
    assert done.returncode == 1
    assert done.stderr == "cdictk: error: --bundle: this cdictk runs from no node runtime: name one\n"
    done = cdictk("system", "install-runtime", "--bundle", str(tmp_path), "--prefix", "relative")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "--prefix: 'relative': must be an absolute, normalised path" in done.stderr


def test_the_commands_say_a_file_systems_refusal_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prefix on a read-only file system (a node whose /opt is part of its read-only root)."""
    from cdictk.cli.main import main
    from cdictk.noderuntime import install as module

    def refused(*args: object) -> None:
        raise OSError(30, "Read-only file system", "/host-opt-cdictk/.lock")

    monkeypatch.setattr(module, "install", refused)
    monkeypatch.setattr(module, "uninstall", refused)
    runtime = str(fake_runtime(tmp_path / "runtime"))
    assert main(["system", "install-runtime", "--bundle", runtime, "--target", "/host-opt-cdictk"]) == 1
    assert main(["system", "uninstall-runtime", "--target", "/host-opt-cdictk"]) == 1
    line = "cdictk: error: /host-opt-cdictk/.lock: Read-only file system\n"
    assert capsys.readouterr().err == line * 2
