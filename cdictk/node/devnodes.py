"""NVIDIA device nodes under the dev root, with what stat says about them.

A spec names each node with its container path (``/dev/nvidia0``) and, when the dev root is not ``/``,
its host path. Type, major, minor, mode and group come from ``lstat``: a symlink or a regular file where a
node should be is not a device node and is ignored.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from cdictk.startpath.helpers.roots import Roots

CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# The management device leaves out nodes that belong to other drivers' devices (GPUDirect Storage,
# NVSwitch, NVLink): they have their own modes and would hand a container a fabric.
_BLOCKED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    path: str  # in the container, e.g. /dev/nvidia0
    host_path: str
    major: int
    minor: int
    mode: int | None  # permission bits; None when the node is not on the host (made from procfs facts)
    gid: int | None


def stat_node(roots: Roots, path: str) -> NodeInfo | None:
    """The character device at ``path`` under the dev root, or None."""
    host_path = roots.in_dev(path)
    try:
        info = os.lstat(host_path)
    except OSError:
        return None
    if not stat.S_ISCHR(info.st_mode):
        return None
    return NodeInfo(
        path,
        host_path,
        os.major(info.st_rdev),
        os.minor(info.st_rdev),
        stat.S_IMODE(info.st_mode),
        info.st_gid,
    )


def control_nodes(roots: Roots) -> list[NodeInfo]:
    return [node for path in CONTROL_NODES if (node := stat_node(roots, path)) is not None]


def gpu_node(roots: Roots, minor: int) -> NodeInfo | None:
    return stat_node(roots, f"/dev/nvidia{minor}")


def cap_node(roots: Roots, minor: int, caps_major: int | None) -> NodeInfo | None:
    """``/dev/nvidia-caps/nvidia-cap<minor>``: from the host, or from procfs facts when not created yet.

    nvidia-modprobe creates cap nodes lazily, so a freshly made MIG instance may have none yet; a node
    with its major and minor lets the runtime create it in the container all the same.
    """
    path = f"/dev/nvidia-caps/nvidia-cap{minor}"
    node = stat_node(roots, path)
    if node is None and caps_major is not None:
        node = NodeInfo(path, roots.in_dev(path), caps_major, minor, None, None)
    return node


def all_nvidia_nodes(roots: Roots) -> list[NodeInfo]:
    """Every NVIDIA node (management mode): GPUs, control nodes, caps and IMEX channels."""
    found: list[NodeInfo] = []
    # Names: "nvidia..." in /dev (less other drivers'); PREFIX<number> in the caps directories.
    for directory, prefix in (
        ("/dev", None),
        ("/dev/nvidia-caps", "nvidia-cap"),
        ("/dev/nvidia-caps-imex-channels", "channel"),
    ):
        try:
            names = sorted(os.listdir(roots.in_dev(directory)))
        except OSError:
            continue
        for name in names:
            if prefix is None:
                wanted = name.startswith("nvidia") and not name.startswith(_BLOCKED_PREFIXES)
            else:
                wanted = name.startswith(prefix) and name[len(prefix) :].isdecimal()
            if wanted and (node := stat_node(roots, f"{directory}/{name}")) is not None:
                found.append(node)
    return found
