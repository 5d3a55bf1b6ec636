"""What the labels are computed from, read from the fake node; a node without NVML or without GPUs."""

from __future__ import annotations

import os
import re

import pytest

from cdictk.labels.nodeview import NodeViewError, read_node
from tests.conftest import NodeFactory, roots_of

pytestmark = pytest.mark.root


def test_the_eight_gpu_node(make_node: NodeFactory) -> None:
    node = make_node("eight")
    view = read_node(roots_of(node))
    assert (view.driver_version, view.cuda_version, len(view.gpus)) == ("580.95.05", 13000, 8)
    assert set(view.pci_classes.values()) == {0x030200}
    assert view.machine == "DGX H100" and view.vgpus == () and view.warnings == ()
    first = view.gpus[0]
    assert first.mig_capable and first.memory_mib == 81559 and first.compute_capability == (9, 0)
    assert [(m.profile, m.multiprocessors, m.copy_engines) for m in first.migs] == [
        ("3g.40gb", 60, 3),
        ("1g.10gb", 16, 1),
        ("1g.10gb", 16, 1),
    ]


def test_no_nvml_is_an_error(make_node: NodeFactory) -> None:
    node = make_node("single")
    os.unlink(os.path.join(node.lib_dir, "libnvidia-ml.so.1"))
    with pytest.raises(NodeViewError, match=re.escape(f"libnvidia-ml.so.1: not found under {node.root}")):
        read_node(roots_of(node))


def test_no_gpu_is_an_error(make_node: NodeFactory) -> None:
    node = make_node("single")
    config = node.nvml_config()
    config.gpus = []
    node.write_nvml_config(config)
    with pytest.raises(NodeViewError, match="NVML reports no GPU"):
        read_node(roots_of(node))


def test_an_unreadable_machine_and_class(make_node: NodeFactory) -> None:
    node = make_node("single")
    os.unlink(os.path.join(node.sys, "class/dmi/id/product_name"))
    os.unlink(os.path.join(node.sys, "bus/pci/devices/0000:18:00.0/class"))
    view = read_node(roots_of(node))
    assert view.machine is None and view.pci_classes == {"0000:18:00.0": None} and view.vgpus is None
