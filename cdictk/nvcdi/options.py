"""What ``cdictk cdi generate`` is asked for, and a device's parts before they become edits."""

from __future__ import annotations

from dataclasses import dataclass, field

from cdictk.cdi.names import kind_spec_problem, vendor_or_class_problem
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


def kind_problem(vendor: str, cls: str) -> tuple[str, str] | None:
    """What is wrong with the kind a spec is asked for ("vendor" or "class", why), or None.

    The reference library's rules and the CDI specification's own limits: cdictk never writes a spec
    that ``cdictk cdi validate`` refuses.
    """
    for what, value in (("vendor", vendor), ("class", cls)):
        problem = vendor_or_class_problem(what, value)
        if problem:
            return what, problem
    problem = kind_spec_problem(f"{vendor}/{cls}")
    if problem:
        return ("class" if problem.startswith("invalid class") else "vendor"), problem
    return None
