"""Discovered nodes and files -> CDI device nodes and mounts."""

from __future__ import annotations

from cdictk.cdi.model import DeviceNode, Mount
from cdictk.node.devnodes import NodeInfo
from cdictk.node.driverfiles import DriverFile, FileKind

READ_ONLY = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
# The sockets and the MPS pipe directory: clients connect to the daemons' sockets and open the pipes
# the MPS daemon made there, and the kernel checks both on the inode, not the mount: a read-only bind
# lets them (tests/unit/nvcdi/test_edits.py), and keeps a container from creating, renaming or
# chmod'ing anything in a host directory every GPU container shares.
IPC = [*READ_ONLY, "noexec"]


def device_node(node: NodeInfo) -> DeviceNode:
    """What stat said, minus the owner (runtimes map it into the container's user namespace)."""
    return DeviceNode(
        path=node.path,
        host_path="" if node.host_path == node.path else node.host_path,
        type="c",
        major=node.major,
        minor=node.minor,
        file_mode=node.mode,
        permissions="rwm",
        gid=node.gid or None,  # zero is left out, as NVIDIA's generator does
    )


def group_only_gids(nodes: list[NodeInfo]) -> list[int]:
    """Groups a container process must join to open nodes that are not open to everyone.

    A node such as /dev/dri/renderD128 (0660, group render) works for root in the container but not for
    an unprivileged user unless the process carries the group.
    """
    return sorted(
        {node.gid for node in nodes if node.gid and node.mode is not None and node.mode & 0o006 != 0o006}
    )


def mount(path: str, host_path: str, options: list[str]) -> Mount:
    return Mount(host_path=host_path, container_path=path, options=list(options))


def file_mount(driver_file: DriverFile) -> Mount:
    ipc = driver_file.kind in (FileKind.SOCKET, FileKind.DIRECTORY)
    return mount(driver_file.path, driver_file.host_path, IPC if ipc else READ_ONLY)
