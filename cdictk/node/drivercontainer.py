"""A driver that lives in a driver container (the GPU Operator's), seen by the host at /run/nvidia/driver.

On such a node the host's own library directories hold no NVIDIA driver: its libraries, programs and
ld.so.cache are in the container's root filesystem, which the operator shares at
:data:`DRIVER_CONTAINER_ROOT`. Generating against the host's ``/`` would find nothing, so discovery
uses that tree as the driver root when the given root has no driver and the tree has one, and says so.
The dev root stays where it was: the kernel's device nodes are the node's.
"""

from __future__ import annotations

import os

from cdictk.node.libraries import candidate_dirs
from cdictk.startpath.helpers.roots import Roots, join, resolve

DRIVER_CONTAINER_ROOT = "/run/nvidia/driver"
# Either names the driver: libcuda for a compute install, NVML for every install.
_DRIVER_NAMES = ("libcuda.so.1", "libnvidia-ml.so.1")


def has_driver(root: str, dirs: list[str]) -> bool:
    """Whether one of ``dirs`` (inside ``root``) holds the driver's libcuda or NVML."""
    return any(
        resolve(root, f"{directory}/{name}") is not None for directory in dirs for name in _DRIVER_NAMES
    )


def in_driver_container(roots: Roots, dirs: list[str], warnings: list[str]) -> tuple[Roots, list[str]] | None:
    """The roots and library directories of a driver container's tree when ``roots`` has no driver in
    ``dirs`` and the tree has one; None otherwise."""
    tree = join(roots.driver, DRIVER_CONTAINER_ROOT)
    if has_driver(roots.driver, dirs) or not os.path.isdir(tree):
        return None
    inside = roots.with_driver(tree)
    tree_warnings: list[str] = []
    tree_dirs = candidate_dirs(inside, tree_warnings)
    if not has_driver(tree, tree_dirs):
        return None
    warnings += tree_warnings
    warnings.append(
        f"no driver under {roots.driver}; using the driver container's at {tree} (--driver-root {tree})"
    )
    return inside, tree_dirs
