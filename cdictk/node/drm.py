"""A GPU's DRM nodes (``/dev/dri/cardN``, ``renderDN``) and their ``/dev/dri/by-path`` links.

The kernel lists them under ``/sys/bus/pci/devices/<bus id>/drm``; the nodes themselves are looked up
under the dev root and must be character devices. A by-path link is reported only when it exists on the
host and points at one of this GPU's nodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cdictk.node.devnodes import NodeInfo, stat_node
from cdictk.startpath.helpers.roots import Roots


@dataclass(frozen=True, slots=True)
class DrmInfo:
    nodes: list[NodeInfo] = field(default_factory=list)
    # (link target as written on the host, link path in the container)
    links: list[tuple[str, str]] = field(default_factory=list)


def drm_for_gpu(roots: Roots, bus_id: str) -> DrmInfo:
    try:
        names = sorted(os.listdir(roots.in_sys(f"bus/pci/devices/{bus_id}/drm")))
    except OSError:
        return DrmInfo()
    nodes = [
        node
        for name in names
        if name.startswith(("card", "renderD")) and (node := stat_node(roots, f"/dev/dri/{name}")) is not None
    ]
    names_found = {os.path.basename(node.path) for node in nodes}
    links = []
    for suffix in ("card", "render"):
        link = f"/dev/dri/by-path/pci-{bus_id}-{suffix}"
        try:
            target = os.readlink(roots.in_dev(link))
        except OSError:
            continue
        if os.path.basename(target) in names_found:
            links.append((target, link))
    return DrmInfo(nodes, links)
