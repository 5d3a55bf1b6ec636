"""What the check's steps found, handed to the steps after them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from realnode.carried import Carried
from realnode.containers import Containers
from realnode.pyenv import Venv

KIND = "nvidia.com/gpu"


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
