"""`cdictk system create-dev-char-symlinks` on fake nodes: relative links, idempotence, replacement,
refusals, --create-all with and without --create-device-nodes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.node.devchar import link_target
from tests.conftest import NodeFactory
from tests.fakenode.node import CAPS_MAJOR, UVM_MAJOR, FakeNode, mig_cap_minor

# The nodes of the "single" preset and their numbers.
SINGLE = {
    "nvidiactl": "195:255",
    "nvidia-modeset": "195:254",
    "nvidia-uvm": f"{UVM_MAJOR}:0",
    "nvidia-uvm-tools": f"{UVM_MAJOR}:1",
    "nvidia0": "195:0",
    "nvidia-caps/nvidia-cap1": f"{CAPS_MAJOR}:1",
    "nvidia-caps/nvidia-cap2": f"{CAPS_MAJOR}:2",
}


def run(capsys: pytest.CaptureFixture[str], node: FakeNode, *args: str) -> tuple[int, str, str]:
    code = main(
        [
            "system",
            "create-dev-char-symlinks",
            "--driver-root",
            node.root,
            "--proc-root",
            node.proc,
            "--dev-char-path",
            char_dir(node),
            *args,
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def char_dir(node: FakeNode) -> str:
    return f"{node.root}/dev/char"


def links(node: FakeNode) -> dict[str, str]:
    directory = char_dir(node)
    return {name: os.readlink(os.path.join(directory, name)) for name in sorted(os.listdir(directory))}


@pytest.mark.root
def test_links_are_relative_as_udev_makes_them(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    code, out, err = run(capsys, node)
    assert code == 0 and out == ""
    expected = {numbers: f"../{name}" for name, numbers in SINGLE.items()}
    assert links(node) == dict(sorted(expected.items()))
    for name, numbers in SINGLE.items():
        info = os.stat(os.path.join(char_dir(node), numbers))  # the link resolves to its node
        assert stat.S_ISCHR(info.st_mode) and f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}" == numbers
        assert f"linked {char_dir(node)}/{numbers} -> ../{name}" in err.splitlines()
    assert err.splitlines()[-1] == f"{char_dir(node)}: 7 links created, 0 replaced, 0 already right"


@pytest.mark.root
def test_a_second_run_changes_nothing(capsys: pytest.CaptureFixture[str], make_node: NodeFactory) -> None:
    node = make_node("single")
    assert run(capsys, node)[0] == 0
    before = {name: os.lstat(os.path.join(char_dir(node), name)) for name in os.listdir(char_dir(node))}
    code, _, err = run(capsys, node)
    assert code == 0 and err == f"{char_dir(node)}: 0 links created, 0 replaced, 7 already right\n"
    for name, info in before.items():
        after = os.lstat(os.path.join(char_dir(node), name))
        assert (after.st_ino, after.st_ctime_ns) == (info.st_ino, info.st_ctime_ns)


@pytest.mark.root
def test_a_wrong_symlink_is_replaced_and_its_target_untouched(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    os.makedirs(char_dir(node))
    os.symlink("../nvidia7", f"{char_dir(node)}/195:0")
    os.symlink(outside, f"{char_dir(node)}/195:255")
    code, _, err = run(capsys, node)
    assert code == 0
    assert f"replaced {char_dir(node)}/195:0 -> ../nvidia0 (was ../nvidia7)" in err.splitlines()
    assert f"replaced {char_dir(node)}/195:255 -> ../nvidiactl (was {outside})" in err.splitlines()
    assert err.splitlines()[-1] == f"{char_dir(node)}: 5 links created, 2 replaced, 0 already right"
    assert links(node)["195:0"] == "../nvidia0" and links(node)["195:255"] == "../nvidiactl"
    assert outside.read_text() == "precious\n" and not os.path.islink(outside)
    assert [name for name in os.listdir(char_dir(node)) if name.startswith(".")] == []  # no temp links left


@pytest.mark.root
def test_a_regular_file_at_a_link_name_is_refused(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    os.makedirs(char_dir(node))
    Path(char_dir(node), "195:0").write_text("mine\n")
    code, _, err = run(capsys, node)
    assert code == 1
    assert err.splitlines()[-2:] == [
        f"{char_dir(node)}: 6 links created, 0 replaced, 0 already right",
        f"cdictk: error: {char_dir(node)}/195:0: a regular file, not a symlink to ../nvidia0; left alone",
    ]
    assert Path(char_dir(node), "195:0").read_text() == "mine\n"


@pytest.mark.root
def test_a_symlinked_link_directory_is_refused(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, char_dir(node))
    code, _, err = run(capsys, node)
    assert (code, err) == (
        1,
        f"cdictk: error: {char_dir(node)}: a symlink, not a directory; not followed\n",
    )
    assert os.listdir(elsewhere) == []


@pytest.mark.root
def test_dry_run_changes_nothing(capsys: pytest.CaptureFixture[str], make_node: NodeFactory) -> None:
    node = make_node("single")
    code, _, err = run(capsys, node, "--dry-run")
    assert code == 0 and f"would link {char_dir(node)}/195:0 -> ../nvidia0" in err.splitlines()
    assert (
        err.splitlines()[-1]
        == f"{char_dir(node)}: 7 links would be created, 0 would be replaced, 0 already right"
    )
    assert not os.path.lexists(char_dir(node))
    os.makedirs(char_dir(node))
    os.symlink("../nvidia7", f"{char_dir(node)}/195:0")
    code, _, err = run(capsys, node, "--dry-run")
    assert (
        code == 0
        and f"would replace {char_dir(node)}/195:0 -> ../nvidia0 (was ../nvidia7)" in err.splitlines()
    )
    assert links(node) == {"195:0": "../nvidia7"}


def test_links_from_another_directory_climb_to_the_node(tmp_path: Path) -> None:
    (tmp_path / "real/dev").mkdir(parents=True)
    os.symlink("real", tmp_path / "alias")
    # The node's directory through a link: the target is computed from real paths, as the kernel resolves.
    assert link_target(str(tmp_path / "char"), str(tmp_path / "alias/dev/nvidia0")) == "../real/dev/nvidia0"
    assert link_target("/dev/char", "/dev/nvidia-caps/nvidia-cap1") == "../nvidia-caps/nvidia-cap1"
    assert link_target("/dev/char", "/run/nvidia/driver/dev/nvidia0") == "../../run/nvidia/driver/dev/nvidia0"


def eight_all_links(node: FakeNode) -> dict[str, str]:
    """Every link --create-all makes on the "eight" preset: control, MIG config/monitor, GPUs and caps."""
    expected = {
        "195:255": "../nvidiactl",
        "195:254": "../nvidia-modeset",
        f"{UVM_MAJOR}:0": "../nvidia-uvm",
        f"{UVM_MAJOR}:1": "../nvidia-uvm-tools",
    }
    for gpu in node.preset.gpus:
        expected[f"195:{gpu.minor}"] = f"../nvidia{gpu.minor}"
        for gi in range(15):
            minors = [mig_cap_minor(gpu.minor, gi)] + [mig_cap_minor(gpu.minor, gi, ci) for ci in range(8)]
            for minor in [1, 2, *minors]:
                expected[f"{CAPS_MAJOR}:{minor}"] = f"../nvidia-caps/nvidia-cap{minor}"
    return dict(sorted(expected.items()))


@pytest.mark.root
def test_create_all_with_create_device_nodes(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("eight")
    os.unlink(f"{node.root}/dev/nvidiactl")
    os.unlink(f"{node.root}/dev/nvidia3")
    code, _, err = run(capsys, node, "--create-all", "--create-device-nodes")
    assert code == 0, err
    expected = eight_all_links(node)
    assert len(expected) == 4 + 2 + 8 + 8 * 135
    assert links(node) == expected
    assert err.splitlines()[0] == f"created {node.root}/dev/nvidiactl (195:255)"
    assert (
        err.splitlines()[-1]
        == f"{char_dir(node)}: {len(expected)} links created, 0 replaced, 0 already right"
    )
    # The MIG devices' capabilities exist and resolve; nvidia3 (not a control node) is linked before it exists.
    for mig in node.preset.migs:
        for minor in (mig_cap_minor(0, mig.gi), mig_cap_minor(0, mig.gi, mig.ci)):
            assert os.stat(f"{char_dir(node)}/{CAPS_MAJOR}:{minor}").st_rdev == os.makedev(CAPS_MAJOR, minor)
    assert os.stat(f"{char_dir(node)}/195:255").st_rdev == os.makedev(195, 255)
    assert not os.path.exists(f"{char_dir(node)}/195:3")
    assert "nvswitch" not in "".join(links(node).values())
    code, _, err = run(capsys, node, "--create-all", "--create-device-nodes")
    assert (
        code == 0 and err == f"{char_dir(node)}: 0 links created, 0 replaced, {len(expected)} already right\n"
    )


@pytest.mark.root
def test_create_all_skips_missing_nodes_without_create_device_nodes(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("eight")
    os.unlink(f"{node.root}/dev/nvidia3")
    code, _, err = run(capsys, node, "--create-all")
    assert code == 0, err
    existing = {
        numbers: target
        for numbers, target in eight_all_links(node).items()
        if os.path.lexists(os.path.normpath(os.path.join(char_dir(node), target)))
    }
    assert links(node) == existing and "195:3" not in existing
    assert len(existing) == 4 + 2 + 7 + 6  # control, config and monitor, GPUs, the MIG devices' caps
    skipped = len(eight_all_links(node)) - len(existing)
    assert err.splitlines()[0] == (
        f"cdictk: note: {skipped} nodes not there, not linked (first: {node.root}/dev/nvidia-caps/nvidia-cap3); "
        "--create-device-nodes links them too"
    )


@pytest.mark.root
def test_create_all_refuses_a_wrong_node(capsys: pytest.CaptureFixture[str], make_node: NodeFactory) -> None:
    node = make_node("single")
    os.unlink(f"{node.root}/dev/nvidia0")
    Path(node.root, "dev/nvidia0").write_text("not a device\n")
    code, _, err = run(capsys, node, "--create-all", "--create-device-nodes")
    assert code == 1
    assert err.splitlines()[-1] == (
        f"cdictk: error: {node.root}/dev/nvidia0: a regular file where character device 195:0 should be; left alone"
    )
    assert "195:0" not in links(node)


@pytest.mark.root
def test_create_all_needs_the_driver_in_proc_devices(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    Path(node.proc, "devices").write_text("Character devices:\n  1 mem\n")
    code, _, err = run(capsys, node, "--create-all")
    assert (code, err) == (
        1,
        f"cdictk: error: {node.proc}/devices: no NVIDIA character devices (is the nvidia module loaded? "
        "--load-kernel-modules)\n",
    )
    assert not os.path.lexists(char_dir(node))


@pytest.mark.root
def test_load_kernel_modules_and_create_device_nodes_run_first(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    os.unlink(f"{node.root}/dev/nvidia-uvm")
    log = tmp_path / "calls"
    modprobe = tmp_path / "modprobe"
    modprobe.write_text(f'#!/bin/sh\necho "$1" >> {log}\n')
    modprobe.chmod(0o755)
    code, _, err = run(
        capsys, node, "--load-kernel-modules", "--modprobe", str(modprobe), "--create-device-nodes"
    )
    assert code == 0, err
    assert log.read_text().splitlines() == ["nvidia", "nvidia-uvm", "nvidia-modeset"]
    assert err.splitlines()[0] == f"created {node.root}/dev/nvidia-uvm ({UVM_MAJOR}:0)"
    assert links(node)[f"{UVM_MAJOR}:0"] == "../nvidia-uvm"
