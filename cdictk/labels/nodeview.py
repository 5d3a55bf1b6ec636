"""What a node's GPU labels are computed from, read from its roots: NVML's answer (through the one NVML
query discovery uses), each GPU's PCI class, the vGPUs among the node's PCI functions, and the machine's
DMI product name."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cdictk.node.drivercontainer import in_driver_container
from cdictk.node.facts import module_hint
from cdictk.node.gpus import Gpu
from cdictk.node.libchoice import LibraryError
from cdictk.node.libraries import candidate_dirs
from cdictk.node.nvml import query_nvml
from cdictk.node.nvmllib import NVML, nvml_library
from cdictk.node.pcidevices import VgpuHost, pci_class, vgpu_scan
from cdictk.node.procfs import read_loaded_modules
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots, read_text

PRODUCT_NAME = "class/dmi/id/product_name"  # under sysfs: the machine's model, as its firmware names it


class NodeViewError(CdictkError):
    def __init__(self, reason: str) -> None:
        super().__init__("", "", reason)


@dataclass(frozen=True, slots=True)
class NodeView:
    driver_version: str  # NVML's: 580.95.05
    cuda_version: int  # NVML's CUDA driver version: 13000 for 13.0; 0: NVML gave none
    gpus: tuple[Gpu, ...]
    pci_classes: dict[str, int | None] = field(default_factory=dict)  # by GPU bus id; None: unreadable
    vgpus: tuple[VgpuHost, ...] | None = ()  # None: the configuration spaces could not be read
    machine: str | None = None  # DMI's product name; None: unreadable
    warnings: tuple[str, ...] = ()  # what was found wanting (a GPU NVML could not describe)


def read_node(roots: Roots) -> NodeView:
    """The node's view; NodeViewError when it has no NVML or NVML reports no GPU."""
    warnings: list[str] = []
    candidates = candidate_dirs(roots, warnings)
    moved = in_driver_container(roots, candidates, warnings)
    driver_root = moved[0].driver if moved is not None else roots.driver
    modules = read_loaded_modules(roots)
    try:
        library = nvml_library(driver_root)
    except LibraryError as exc:  # none, or none root's alone
        raise NodeViewError(f"{NVML}: {exc.problem.reason}{module_hint(modules)}") from exc
    answer = query_nvml(library)
    if not answer.gpus:
        lost = f"; NVML could not describe {'; '.join(answer.left_out)}" if answer.left_out else ""
        raise NodeViewError("NVML reports no GPU" + lost + module_hint(modules))
    machine = read_text(os.path.join(roots.sys, PRODUCT_NAME))
    vgpus = vgpu_scan(roots)
    return NodeView(
        driver_version=answer.version,
        cuda_version=answer.cuda_version,
        gpus=tuple(answer.gpus),
        pci_classes={gpu.bus_id: pci_class(roots, gpu.bus_id) for gpu in answer.gpus},
        vgpus=None if vgpus is None else tuple(vgpus),
        machine=None if machine is None else machine.strip(),
        warnings=(*warnings, *(f"{line}: NVML cannot describe it; left out" for line in answer.left_out)),
    )
