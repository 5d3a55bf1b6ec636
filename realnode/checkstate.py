"""What the check's steps found, handed to the steps after them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from realnode.carried import Carried
from realnode.containers import Containers
from realnode.pyenv import Venv

KIND = "nvidia.com/gpu"


@dataclass(frozen=True)
class NodeRuntime:
    """The node runtime as the check installed it (realnode/bundledruntime.py), under ``prefix``."""

    prefix: str
    runtime_id: str
    size: int  # bytes of its files on the node
    files: int

    def stable(self, name: str) -> str:
        """``prefix``/bin/``name``: the path an engine is configured with."""
        return os.path.join(self.prefix, "bin", name)

    def current(self, name: str) -> str:
        """``prefix``/current/bin/``name``: the version ``current`` names (the spec's hook)."""
        return os.path.join(self.prefix, "current", "bin", name)


@dataclass
class State:
    """What the steps found, for the steps after them (None: the step that makes it failed)."""

    work: str
    carried: Carried | None = None
    venv: Venv | None = None
    cuda_check: str | None = None
    spec_dirs: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, dict[str, Any]] = field(default_factory=dict)
    image: str | None = None
    containers: Containers | None = None
    runs: bool = False  # runc ran a plain container
    mounted_cgroup: str | None = None  # a cgroup2 mount the check made (a VM without one), undone at the end
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # injected configs, by spec
    device: str = "0"
    facts: dict[str, Any] = field(default_factory=dict)
    runtime: NodeRuntime | None = None
