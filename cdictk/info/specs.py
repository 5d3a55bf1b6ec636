"""The CDI specs on a node, and whether each one still matches it.

A spec is *stale* when a container given one of its devices would fail or get the wrong thing: a
device node or a mounted file it names is gone from the host (a driver upgrade removes the old
libraries; a GPU or MIG instance removed takes its nodes), or it lacks a GPU or MIG device the node
has now (named by UUID, as ``cdictk cdi generate`` and NVIDIA's tools name them). A spec that is not
stale but differs from what ``cdictk cdi generate`` would write now (other options, an older cdictk)
is reported as such, without failing. This is NVIDIA's #885 and #1828: stale specs after driver
upgrades and MIG reconfiguration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cdictk.cdi.load import load_spec
from cdictk.cdi.model import ContainerEdits, Spec
from cdictk.cdi.specdirs import spec_paths
from cdictk.errors import CdictkError, Problem
from cdictk.info.checks import Finding, Status
from cdictk.node.facts import NodeFacts
from cdictk.node.roots import join

GENERATE = "cdictk cdi generate --output {path}"
MAX_SHOWN = 3  # missing paths named in a finding


@dataclass(frozen=True, slots=True)
class SpecState:
    path: str
    kind: str  # "" when the file cannot be loaded
    devices: int
    status: str  # "current", "differs", "stale", "invalid"
    reason: str


def check_specs(
    dirs: list[str], kind: str, facts: NodeFacts | None, fresh: bytes | None, host_root: str = "/"
) -> tuple[list[SpecState], list[Finding]]:
    """Every spec in ``dirs``; a FAIL when one of ``kind`` is stale or invalid, or none exists.

    ``fresh`` is what ``cdictk cdi generate`` writes for this node with its defaults (None: unknown).
    The specs' host paths are looked up under ``host_root`` (a container that mounts the host at /host).
    """
    states: list[SpecState] = []
    findings: list[Finding] = []
    problems: list[Problem] = []
    for directory in dirs:
        for path in spec_paths(directory, problems):
            state = _check(path, kind, facts, fresh, host_root)
            states.append(state)
            if state.kind != kind and state.status != "invalid":
                continue
            label = f"spec {path}"
            fix = GENERATE.format(path=path)
            if state.status in ("stale", "invalid"):
                findings.append(Finding(label, Status.FAIL, f"{state.status}: {state.reason}", fix))
            elif state.status == "differs":
                findings.append(Finding(label, Status.OK, f"{state.devices} devices; {state.reason}"))
            else:
                findings.append(Finding(label, Status.OK, f"{state.devices} devices, {state.reason}"))
    findings += [Finding(f"spec dir {p.file}", Status.WARN, p.reason) for p in problems]
    if not any(state.kind == kind for state in states):
        findings.append(
            Finding(
                "specs",
                Status.FAIL,
                f"no CDI spec of kind {kind} in {', '.join(dirs)}: CDI runtimes cannot give GPUs",
                GENERATE.format(path="/var/run/cdi/nvidia.yaml"),
            )
        )
    return states, findings


def _check(path: str, kind: str, facts: NodeFacts | None, fresh: bytes | None, host_root: str) -> SpecState:
    try:
        spec = load_spec(path)
    except CdictkError as exc:
        return SpecState(path, "", 0, "invalid", str(exc))
    count = len(spec.devices)
    if spec.kind != kind:
        return SpecState(path, spec.kind, count, "current", "another kind")
    missing = _missing_host_paths(spec, host_root)
    if missing:
        shown = ", ".join(missing[:MAX_SHOWN]) + (
            f" and {len(missing) - MAX_SHOWN} more" if len(missing) > MAX_SHOWN else ""
        )
        return SpecState(path, spec.kind, count, "stale", f"names host paths that are gone: {shown}")
    if facts is not None:
        lacking = _missing_uuids(spec, facts)
        if lacking:
            return SpecState(
                path, spec.kind, count, "stale", f"lacks devices the node has: {', '.join(lacking)}"
            )
    try:
        with open(path, "rb") as handle:
            same = fresh is not None and handle.read() == fresh
    except OSError:
        same = False
    if same:
        return SpecState(path, spec.kind, count, "current", "as cdictk cdi generate writes it now")
    return SpecState(path, spec.kind, count, "differs", "usable, but not what cdictk cdi generate writes now")


def _edits(spec: Spec) -> list[ContainerEdits]:
    return [spec.container_edits, *(device.container_edits for device in spec.devices)]


def _missing_host_paths(spec: Spec, host_root: str) -> list[str]:
    missing: list[str] = []
    for edits in _edits(spec):
        paths = [node.host_path or node.path for node in edits.device_nodes]
        paths += [mount.host_path for mount in edits.mounts]
        for path in paths:
            if path.startswith("/") and not os.path.lexists(join(host_root, path)) and path not in missing:
                missing.append(path)
    return missing


def _missing_uuids(spec: Spec, facts: NodeFacts) -> list[str]:
    """The node's GPU and MIG UUIDs the spec has no device for, when it names devices by UUID."""
    names = {device.name for device in spec.devices}
    if not any(name.startswith(("GPU-", "MIG-")) for name in names):
        return []  # named another way: nothing to compare
    node = [gpu.uuid for gpu in facts.gpus if not gpu.mig_enabled]
    node += [mig.uuid for gpu in facts.gpus for mig in gpu.migs]
    return [uuid for uuid in node if uuid not in names]
