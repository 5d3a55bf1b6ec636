"""Device nodes of the drivers beside the GPU's: NVSwitch, GPUDirect Storage, InfiniBand, GDRCopy, IMEX.

Each gated mode (``--mode nvswitch|gds|mofed|gdrcopy``) is a row of :data:`GATED`: the node patterns
(``fnmatch`` on the name, in one directory) whose character devices make its one ``all`` device. IMEX
channels are ``/dev/nvidia-caps-imex-channels/channelN``, one device each. Every node is stat'ed, so
the spec carries its type, numbers and mode: NVIDIA's IMEX devices carry a path alone, which leaves
a runtime to stat a host path that may not be there when the container starts.
"""

from __future__ import annotations

import fnmatch
import os
import re

from cdictk.node.devnodes import NodeInfo, stat_node
from cdictk.sorting import natural_key
from cdictk.startpath.helpers.roots import Roots

IMEX_DIR = "/dev/nvidia-caps-imex-channels"
MAX_IMEX_CHANNEL = (1 << 20) - 1  # a 20-bit minor, as the driver numbers them
_IMEX_CHANNEL = re.compile(r"channel(0|[1-9][0-9]{0,6})")

# mode -> the node patterns of its device, each a directory and a name pattern in it
GATED: dict[str, tuple[tuple[str, str], ...]] = {
    "nvswitch": (("/dev", "nvidia-nvswitchctl"), ("/dev", "nvidia-nvswitch*")),
    "gds": (("/dev", "nvidia-fs*"),),
    "mofed": (("/dev/infiniband", "uverbs*"), ("/dev/infiniband", "rdma_cm")),
    "gdrcopy": (("/dev", "gdrdrv"),),
}


def _names(roots: Roots, directory: str) -> list[str]:
    try:
        return sorted(os.listdir(roots.in_dev(directory)), key=natural_key)
    except OSError:
        return []


def matching_nodes(roots: Roots, patterns: tuple[tuple[str, str], ...]) -> list[NodeInfo]:
    """The character devices whose names match ``patterns``, each once, in natural order."""

    found: dict[str, NodeInfo] = {}
    for directory, pattern in patterns:
        for name in _names(roots, directory):
            path = f"{directory}/{name}"
            if path not in found and fnmatch.fnmatchcase(name, pattern):
                node = stat_node(roots, path)
                if node is not None:
                    found[path] = node
    return list(found.values())


def gated_pattern_text(mode: str) -> str:
    """``/dev/nvidia-nvswitchctl, /dev/nvidia-nvswitch*``: what the mode looks for, for messages."""
    return ", ".join(f"{directory}/{pattern}" for directory, pattern in GATED[mode])


def imex_channels(roots: Roots) -> dict[int, NodeInfo]:
    """The IMEX channel nodes present, by channel number."""
    channels: dict[int, NodeInfo] = {}
    for name in _names(roots, IMEX_DIR):
        match = _IMEX_CHANNEL.fullmatch(name)
        if match is None or int(match.group(1)) > MAX_IMEX_CHANNEL:
            continue
        node = stat_node(roots, f"{IMEX_DIR}/{name}")
        if node is not None:
            channels[int(match.group(1))] = node
    return dict(sorted(channels.items()))


def imex_channel_id(device_id: str) -> int | None:
    """``3`` or ``channel3`` -> 3; None for anything else (or a number past the last channel)."""
    number = device_id.removeprefix("channel")
    if not (number.isascii() and number.isdigit()) or len(number) > 7:
        return None
    value = int(number)
    return value if value <= MAX_IMEX_CHANNEL else None
