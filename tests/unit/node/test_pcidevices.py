"""PCI classes and the vGPU scan from a sysfs tree: the fake node's, and hand-made configuration
spaces (a vGPU's capability, a short read, a non-NVIDIA function, a looping capability list)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.node.pcidevices import COMPUTE_CLASS, VgpuHost, numa_node, pci_class, pcie_root, vgpu_scan
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import NodeFactory, roots_of
from tests.fakenode.node import pci_config

# A vGPU's vendor-specific capability after its id and next bytes: its length, "VF", a record of
# another kind (id 1, 3 bytes long), then the host driver record (id 0): version and branch.
VGPU = bytes([30, 0x56, 0x46, 1, 3, 0xAA, 0, 22]) + b"550.54.16\0" + b"r550_40\0\0\0"


def function(root: Path, address: str, vendor: str = "0x10de", config: bytes | None = None) -> None:
    device = root / "bus/pci/devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text("0x030000\n")
    (device / "config").write_bytes(pci_config(0x030000) if config is None else config)


@pytest.mark.root
def test_the_fake_nodes_gpus_are_3d_controllers_and_no_vgpus(make_node: NodeFactory) -> None:
    node = make_node("eight")
    roots = roots_of(node)
    assert pci_class(roots, "0000:18:00.0") == COMPUTE_CLASS
    assert pci_class(roots, "0000:ff:00.0") is None
    assert vgpu_scan(roots) == []


def test_a_vgpu_shows_its_hosts_driver(tmp_path: Path) -> None:
    function(tmp_path, "0000:01:00.0", config=pci_config(0x030000, ((0x09, VGPU),)))
    function(tmp_path, "0000:02:00.0")  # passthrough
    function(tmp_path, "0000:00:1f.0", vendor="0x8086", config=b"")  # not NVIDIA's: not read
    assert vgpu_scan(Roots(sys=str(tmp_path))) == [VgpuHost("0000:01:00.0", "550.54.16", "r550_40")]


def test_a_short_configuration_space_means_unknown(tmp_path: Path) -> None:
    function(tmp_path, "0000:01:00.0", config=pci_config(0x030000)[:64])  # what a non-root reader gets
    assert vgpu_scan(Roots(sys=str(tmp_path))) is None
    assert vgpu_scan(Roots(sys=str(tmp_path / "none"))) is None


def test_a_looping_capability_list_ends(tmp_path: Path) -> None:
    config = bytearray(pci_config(0x030000))
    config[0x61] = 0x60  # the first capability names itself next
    function(tmp_path, "0000:01:00.0", config=bytes(config))
    assert vgpu_scan(Roots(sys=str(tmp_path))) == []


def test_a_vgpu_record_cut_short_gives_no_version(tmp_path: Path) -> None:
    short = bytes([16]) + VGPU[1:14]  # its length says 16: the record's version does not fit
    function(tmp_path, "0000:01:00.0", config=pci_config(0x030000, ((0x09, short),)))
    assert vgpu_scan(Roots(sys=str(tmp_path))) == [VgpuHost("0000:01:00.0", "", "")]


@pytest.mark.root
def test_the_fake_nodes_gpus_sit_under_their_root_complexes(make_node: NodeFactory) -> None:
    roots = roots_of(make_node("eight"))
    assert [pcie_root(roots, bus) for bus in ("0000:18:00.0", "0000:db:00.0")] == ["pci0000:17", "pci0000:da"]
    assert [numa_node(roots, bus) for bus in ("0000:18:00.0", "0000:db:00.0")] == [0, 1]


@pytest.mark.parametrize(
    ("target", "root"),
    [
        ("../../../devices/pci0000:64/0000:64:00.0/0000:65:00.0", "pci0000:64"),
        ("../../../devices/pci10000:e0/10000:e0:01.0/0000:65:00.0", "pci10000:e0"),  # a VMD domain
        ("/sys/devices/pci0000:64/0000:64:00.0/0000:65:00.0", None),  # sysfs links are relative
        ("../../../devices/pci0000:64/0000:64:00.0/0000:66:00.0", None),  # another function
        ("../../../devices/platform/0000:65:00.0", None),  # no root complex
        ("../../../../elsewhere/pci0000:64/0000:65:00.0", None),
    ],
)
def test_the_pcie_root_is_read_from_the_link_never_followed(
    tmp_path: Path, target: str, root: str | None
) -> None:
    devices = tmp_path / "bus/pci/devices"
    devices.mkdir(parents=True)
    (devices / "0000:65:00.0").symlink_to(target)
    assert pcie_root(Roots(sys=str(tmp_path)), "0000:65:00.0") == root


def test_no_link_or_a_bus_id_to_walk_out_with_gives_nothing(tmp_path: Path) -> None:
    devices = tmp_path / "bus/pci/devices"
    (devices / "0000:65:00.0").mkdir(parents=True)  # a directory, not the kernel's link
    (devices / "0000:65:00.0" / "numa_node").write_text("-1\n")
    (tmp_path / "numa_node").write_text("3\n")
    roots = Roots(sys=str(tmp_path))
    assert pcie_root(roots, "0000:65:00.0") is None and pcie_root(roots, "0000:66:00.0") is None
    assert numa_node(roots, "0000:65:00.0") is None  # -1: no NUMA
    assert numa_node(roots, "../../..") is None and pcie_root(roots, "../..") is None
