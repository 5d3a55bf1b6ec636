"""The node's fingerprint: equal while nothing the spec depends on changes, different when it does."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from cdictk.startpath.helpers.roots import Roots
from cdictk.startpath.specs.fingerprint import node_fingerprint
from tests.conftest import NodeFactory, roots_of
from tests.fakenode.node import _mig


@pytest.mark.root
def test_stable_while_nothing_changes(make_node: NodeFactory) -> None:
    node = make_node("eight")
    first = node_fingerprint(roots_of(node))
    modules = Path(node.proc, "modules")
    modules.write_text(modules.read_text().replace("nvidia_uvm 1531904 0", "nvidia_uvm 1531904 7"))
    os.utime(Path(node.proc, "driver/nvidia/version"))  # touched, not changed
    assert node_fingerprint(roots_of(node)) == first  # a module's use count is no change


@pytest.mark.root
def test_a_mig_reconfiguration_changes_it(make_node: NodeFactory) -> None:
    node = make_node("eight")
    first = node_fingerprint(roots_of(node))
    node.reconfigure_mig(node.preset.migs[:1])  # two compute instances destroyed
    second = node_fingerprint(roots_of(node))
    assert second != first
    node.reconfigure_mig((*node.preset.migs, _mig(1, 9, "1g.10gb", 1, 9856)))
    assert node_fingerprint(roots_of(node)) not in (first, second)


@pytest.mark.root
def test_driver_gpu_and_node_changes_change_it(make_node: NodeFactory) -> None:
    node = make_node("single")
    fingerprints = [node_fingerprint(roots_of(node))]
    Path(node.root, "dev/nvidia-uvm-tools").unlink()
    fingerprints.append(node_fingerprint(roots_of(node)))
    modules = Path(node.proc, "modules")
    modules.write_text(
        "\n".join(line for line in modules.read_text().splitlines() if "nvidia_drm" not in line)
    )
    fingerprints.append(node_fingerprint(roots_of(node)))
    version = Path(node.proc, "driver/nvidia/version")
    version.write_text(version.read_text().replace(node.version, "590.1.2"))
    fingerprints.append(node_fingerprint(roots_of(node)))
    (gpu,) = Path(node.proc, "driver/nvidia/gpus").iterdir()
    gpu.rename(gpu.with_name("0000:99:00.0"))
    fingerprints.append(node_fingerprint(roots_of(node)))
    os.utime(Path(node.root, "etc/ld.so.cache"), ns=(1, 1))
    fingerprints.append(node_fingerprint(roots_of(node)))
    assert len(set(fingerprints)) == len(fingerprints)


def test_a_missing_driver_is_a_fingerprint_too(tmp_path: Path) -> None:
    empty = Roots(driver=str(tmp_path), dev=str(tmp_path), proc=str(tmp_path / "proc"), sys=str(tmp_path))
    assert node_fingerprint(empty) == node_fingerprint(empty)


@pytest.mark.root
def test_the_other_modes_inputs_change_it(tmp_path: Path) -> None:
    """A new IMEX channel, /dev/dxg appearing, a new driver store, InfiniBand and GDRCopy nodes, Tegra
    nodes, a rewritten CSV file given as an input."""
    root = tmp_path / "node"
    node_roots = Roots(str(root), str(root), str(root / "proc"), str(root / "sys"))
    csv = tmp_path / "drivers.csv"
    csv.write_text("lib, /usr/lib/libcuda.so.1.1\n")
    seen = [node_fingerprint(node_roots, (str(csv),))]

    def mknod(path: str, major: int, minor: int) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        os.mknod(root / path, stat.S_IFCHR | 0o666, os.makedev(major, minor))

    changes: list[Callable[[], object]] = [
        lambda: mknod("dev/nvidia-caps-imex-channels/channel0", 507, 0),
        lambda: mknod("dev/nvidia-caps-imex-channels/channel1", 507, 1),
        lambda: mknod("dev/dxg", 10, 125),
        lambda: (root / "usr/lib/wsl/drivers/nv_dispi.inf_amd64_1").mkdir(parents=True),
        lambda: (root / "usr/lib/wsl/drivers/nv_dispi.inf_amd64_1/libcuda.so.1.1").write_text("x"),
        lambda: mknod("dev/infiniband/uverbs0", 231, 192),
        lambda: mknod("dev/gdrdrv", 506, 0),
        lambda: mknod("dev/nvidia-fs0", 508, 0),
        lambda: mknod("dev/nvmap", 10, 121),
        lambda: mknod("dev/nvgpu/igpu0/ctrl", 486, 4),
        lambda: mknod("dev/nvgpu/igpu0/as", 486, 5),
        lambda: csv.write_text("lib, /usr/lib/libcuda.so.1.1\nlib, /usr/lib/libnvrm_gpu.so\n"),
    ]
    for change in changes:
        change()
        now = node_fingerprint(node_roots, (str(csv),))
        assert now not in seen
        seen.append(now)
    mknod("dev/sda", 8, 0)  # not a node any spec holds
    assert node_fingerprint(node_roots, (str(csv),)) == seen[-1]
