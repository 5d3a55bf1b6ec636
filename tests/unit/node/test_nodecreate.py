"""`cdictk system create-device-nodes` on fake nodes: creation, wrong nodes, links, modprobe, dry runs."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.cli.main import main
from tests.conftest import NodeFactory
from tests.fakenode.node import UVM_MAJOR, FakeNode

CONTROL = {
    "nvidiactl": (195, 255),
    "nvidia-modeset": (195, 254),
    "nvidia-uvm": (UVM_MAJOR, 0),
    "nvidia-uvm-tools": (UVM_MAJOR, 1),
}


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """mknod applies the umask: 022 makes the command's chmod to 0666 visible."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def run(capsys: pytest.CaptureFixture[str], node: FakeNode, *args: str) -> tuple[int, str, str]:
    code = main(
        ["system", "create-device-nodes", "--driver-root", node.root, "--proc-root", node.proc, *args]
    )
    out, err = capsys.readouterr()
    return code, out, err


def dev(node: FakeNode, name: str) -> str:
    return f"{node.root}/dev/{name}"


def remove_control_nodes(node: FakeNode) -> None:
    for name in CONTROL:
        os.unlink(dev(node, name))


def assert_node(path: str, major: int, minor: int, mode: int = 0o666) -> None:
    info = os.lstat(path)
    assert stat.S_ISCHR(info.st_mode), path
    assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (major, minor)
    assert stat.S_IMODE(info.st_mode) == mode


@pytest.mark.root
def test_creates_the_missing_control_nodes(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    remove_control_nodes(node)
    code, out, err = run(capsys, node, "--control-devices")
    assert code == 0 and out == ""
    assert err.splitlines() == [
        f"created {dev(node, name)} ({major}:{minor})" for name, (major, minor) in CONTROL.items()
    ]
    for name, (major, minor) in CONTROL.items():
        assert_node(dev(node, name), major, minor)


@pytest.mark.root
def test_right_nodes_are_left_alone(capsys: pytest.CaptureFixture[str], make_node: NodeFactory) -> None:
    node = make_node("single")
    os.chmod(dev(node, "nvidia-uvm-tools"), 0o600)  # an administrator's choice, kept
    before = {name: os.lstat(dev(node, name)) for name in CONTROL}
    os.unlink(dev(node, "nvidia-modeset"))
    code, _, err = run(capsys, node)
    assert code == 0 and err == f"created {dev(node, 'nvidia-modeset')} (195:254)\n"
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        after = os.lstat(dev(node, name))
        assert (after.st_ino, after.st_mode, after.st_ctime_ns) == (
            before[name].st_ino,
            before[name].st_mode,
            before[name].st_ctime_ns,
        )
    assert_node(dev(node, "nvidia-uvm-tools"), UVM_MAJOR, 1, 0o600)
    code, _, err = run(capsys, node)
    assert code == 0 and err == ""


@pytest.mark.root
def test_wrong_things_at_node_paths_are_refused_and_nothing_is_followed(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    remove_control_nodes(node)
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    outside.chmod(0o600)
    os.symlink(outside, dev(node, "nvidiactl"))
    Path(dev(node, "nvidia-modeset")).write_text("a file\n")
    os.mknod(dev(node, "nvidia-uvm"), stat.S_IFCHR | 0o600, os.makedev(UVM_MAJOR, 7))
    code, _, err = run(capsys, node)
    assert code == 1
    assert err.splitlines() == [
        f"created {dev(node, 'nvidia-uvm-tools')} ({UVM_MAJOR}:1)",
        f"cdictk: error: {dev(node, 'nvidiactl')}: a symlink where character device 195:255 should be; left alone",
        f"cdictk: error: {dev(node, 'nvidia-modeset')}: a regular file where character device 195:254 should be; left alone",
        f"cdictk: error: {dev(node, 'nvidia-uvm')}: character device {UVM_MAJOR}:7 where character device {UVM_MAJOR}:0 should be; left alone",
    ]
    assert os.readlink(dev(node, "nvidiactl")) == str(outside)
    assert outside.read_text() == "precious\n" and stat.S_IMODE(outside.stat().st_mode) == 0o600
    assert Path(dev(node, "nvidia-modeset")).read_text() == "a file\n"
    assert_node(dev(node, "nvidia-uvm"), UVM_MAJOR, 7, 0o600)


@pytest.mark.root
def test_a_symlinked_directory_under_the_dev_root_is_not_followed(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dev_root = tmp_path / "devroot"
    dev_root.mkdir()
    os.symlink(elsewhere, dev_root / "dev")
    code, _, err = run(capsys, node, "--dev-root", str(dev_root))
    assert code == 1
    line = f"cdictk: error: {dev_root}/dev: a symlink, not a directory; not followed"
    assert err.splitlines() == [line] * 4
    assert os.listdir(elsewhere) == []


@pytest.mark.root
def test_a_missing_dev_directory_is_made_but_not_a_missing_dev_root(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    fresh = tmp_path / "fresh"
    code, _, err = run(capsys, node, "--dev-root", str(fresh))
    assert (code, err) == (1, f"cdictk: error: {fresh}: the dev root is not a directory\n")
    fresh.mkdir()
    code, _, err = run(capsys, node, "--dev-root", str(fresh))
    assert code == 0 and len(err.splitlines()) == 4
    assert stat.S_IMODE(os.stat(fresh / "dev").st_mode) == 0o755
    assert_node(str(fresh / "dev/nvidiactl"), 195, 255)


@pytest.mark.root
@pytest.mark.parametrize("devices", ["Character devices:\n  1 mem\n\nBlock devices:\n  8 sd\n", None])
def test_no_nvidia_driver_in_proc_devices(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, devices: str | None
) -> None:
    node = make_node("single")
    remove_control_nodes(node)
    path = f"{node.proc}/devices"
    if devices is None:
        os.unlink(path)
        reason = "cannot read it (is procfs mounted there? see --proc-root)"
    else:
        Path(path).write_text(devices)
        reason = "no NVIDIA character devices (is the nvidia module loaded? --load-kernel-modules)"
    code, _, err = run(capsys, node)
    assert (code, err) == (1, f"cdictk: error: {path}: {reason}\n")
    assert not any(os.path.lexists(dev(node, name)) for name in CONTROL)


@pytest.mark.root
def test_a_module_without_a_major_is_reported(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    remove_control_nodes(node)
    path = Path(node.proc, "devices")
    path.write_text(path.read_text().replace(f"{UVM_MAJOR} nvidia-uvm\n", ""))
    code, _, err = run(capsys, node)
    assert code == 1
    assert err.splitlines() == [
        f"created {dev(node, 'nvidiactl')} (195:255)",
        f"created {dev(node, 'nvidia-modeset')} (195:254)",
        f"cdictk: error: {path}: no nvidia-uvm major for /dev/nvidia-uvm (is the nvidia-uvm module loaded?)",
        f"cdictk: error: {path}: no nvidia-uvm major for /dev/nvidia-uvm-tools (is the nvidia-uvm module loaded?)",
    ]


@pytest.mark.root
def test_dry_run_changes_nothing(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    remove_control_nodes(node)
    log = tmp_path / "calls"
    modprobe = tmp_path / "modprobe"
    modprobe.write_text(f'#!/bin/sh\necho "$1" >> {log}\n')
    modprobe.chmod(0o755)
    code, _, err = run(capsys, node, "--dry-run", "--load-kernel-modules", "--modprobe", str(modprobe))
    assert code == 0
    assert err.splitlines() == [
        *(f"would run {modprobe} {name}" for name in ("nvidia", "nvidia-uvm", "nvidia-modeset")),
        *(f"would create {dev(node, name)} ({major}:{minor})" for name, (major, minor) in CONTROL.items()),
    ]
    assert not any(os.path.lexists(dev(node, name)) for name in CONTROL)
    assert not log.exists()
    (tmp_path / "fresh").mkdir()
    code, _, err = run(capsys, node, "--dev-root", str(tmp_path / "fresh"), "--dry-run")
    assert code == 0 and len(err.splitlines()) == 4 and os.listdir(tmp_path / "fresh") == []


@pytest.mark.root
def test_modules_are_loaded_before_proc_devices_is_read(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    remove_control_nodes(node)
    devices = Path(node.proc, "devices")
    loaded = tmp_path / "devices.loaded"
    loaded.write_text(devices.read_text())
    devices.write_text("Character devices:\n  1 mem\n\nBlock devices:\n")
    log = tmp_path / "calls"
    # The fake modprobe "loads" the driver: /proc/devices names it once nvidia-modeset is in.
    modprobe = tmp_path / "modprobe"
    modprobe.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n[ "$1" = nvidia-modeset ] && cp {loaded} {devices}\nexit 0\n'
    )
    modprobe.chmod(0o755)
    code, _, err = run(capsys, node, "--load-kernel-modules", "--modprobe", str(modprobe))
    assert code == 0, err
    assert log.read_text().splitlines() == ["nvidia", "nvidia-uvm", "nvidia-modeset"]
    assert len(err.splitlines()) == 4 and all(line.startswith("created ") for line in err.splitlines())


@pytest.mark.root
def test_a_failing_modprobe_is_a_warning(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    modprobe = tmp_path / "modprobe"
    modprobe.write_text(
        '#!/bin/sh\necho "modprobe: FATAL: Module $1 not found in directory /lib/modules/6.1.0" >&2\nexit 1\n'
    )
    modprobe.chmod(0o755)
    code, _, err = run(capsys, node, "--load-kernel-modules", "--modprobe", str(modprobe))
    assert code == 0  # the nodes are there all the same
    assert err.splitlines() == [
        f"cdictk: warning: {modprobe} {name}: exit status 1: modprobe: FATAL: Module {name} not found in directory /lib/modules/6.1.0"
        for name in ("nvidia", "nvidia-uvm", "nvidia-modeset")
    ]


@pytest.mark.parametrize(
    "command", [["system"], ["system", "create-device-nodes"], ["system", "create-dev-char-symlinks"]]
)
def test_help(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code = main([*command, "--help"])
    out, _ = capsys.readouterr()
    assert code == 0 and out.startswith(f"Usage: cdictk {' '.join(command)}")
    assert "nvidia-ctk system" in out if command == ["system"] else "left alone" in out
