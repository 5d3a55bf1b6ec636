"""What ``cdictk cdi generate`` is asked for, and a device's parts before they become edits."""

from __future__ import annotations

from dataclasses import dataclass, field

from cdictk.node.devnodes import NodeInfo
from cdictk.nvcdi import hooks, naming
from cdictk.nvcdi.naming import Strategy


@dataclass(frozen=True, slots=True)
class SpecOptions:
    vendor: str = "nvidia.com"
    cls: str = "gpu"
    strategies: tuple[Strategy, ...] = naming.DEFAULT_STRATEGIES
    hook_program: hooks.HookProgram | None = None  # None: no hooks at all
    disabled_hooks: frozenset[str] = frozenset()
    ldconfig_path: str | None = None
    all_device: bool = True
    device_ids: tuple[str, ...] = ()  # empty: every device
    target_version: str | None = None  # the newest cdiVersion the spec's readers accept
    include_display_gpus: bool = False  # a DGX Station's "DGX Display" GPU gets a device too


@dataclass(slots=True)
class Parts:
    """One device's nodes and links before they become edits (so ``all`` can merge them)."""

    nodes: list[NodeInfo] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
