"""The CDI specs on a node, and whether each one still matches it.

A spec of the GPU kind is *stale* when a container given one of its devices would fail or get the
wrong thing (NVIDIA's #885 and #1828, stale specs after driver upgrades and MIG reconfiguration):

- a device node or a mounted file it names is gone from the host (a driver upgrade removes the old
  libraries; a removed GPU takes its node). A node the spec describes fully (type and major) is not
  needed on the host: the runtime creates it, as with a MIG capability node not made yet;
- a device node's numbers differ from the host's (the ``nvidia-uvm`` major is given out when the
  module loads, and can change with a reload);
- its devices named by UUID (as ``cdictk cdi generate`` and NVIDIA's tools name them) are not the
  node's GPUs and MIG devices: one is missing, or it names one that no longer exists.

Two files defining the same device (the runtimes drop it) fail as well, and so does a spec file that
someone other than root could change (cdictk skips it; other runtimes would run its hooks as root), and
a spec of any kind that mounts a host path someone other than root could change (cdictk refuses it at
container start; other runtimes mount it as root).
A spec that is not stale but differs from what ``cdictk cdi generate`` writes now (other options, an
older cdictk) is reported without failing. Specs of other kinds are only checked for being readable,
and a problem there is a warning whose fix never writes over them.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass

from cdictk.cdi.load import read_document
from cdictk.cdi.model import ContainerEdits, Spec
from cdictk.cdi.registry import load_registry
from cdictk.cdi.validate import spec_problems
from cdictk.info.checks import Finding, Status
from cdictk.node.facts import NodeFacts
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import join
from cdictk.startpath.specs.specdirs import untrusted
from cdictk.trustscan import repairs

MAX_SHOWN = 3  # paths or names shown in a finding


@dataclass(frozen=True, slots=True)
class SpecState:
    path: str
    kind: str  # "" when the file cannot be read
    devices: int
    status: str  # "current", "differs", "stale", "invalid", "untrusted", "unsafe"
    reason: str


@dataclass(frozen=True, slots=True)
class SpecCheck:
    """What the checks need besides the spec: the node, a fresh generation, how to regenerate."""

    kind: str
    facts: NodeFacts | None
    fresh: bytes | None  # what ``cdictk cdi generate`` writes now with its defaults; None: unknown
    host_root: str = "/"  # where the specs' host paths are looked up
    generate: tuple[str, ...] = ("cdictk", "cdi", "generate")  # the command, with info's roots

    def regenerate(self, path: str) -> str:
        return shlex.join([*self.generate, "--output", path])


def check_specs(dirs: list[str], check: SpecCheck) -> tuple[list[SpecState], list[Finding]]:
    """Every spec in ``dirs``; a FAIL when one of the kind is stale, invalid or in conflict, or none is."""
    registry = load_registry(dirs)
    states: list[SpecState] = []
    findings: list[Finding] = []
    loaded = {spec_file.path for spec_file in registry.spec_files}
    for problem in filter(untrusted, registry.problems):
        states.append(SpecState(problem.file, _declared_kind(problem.file), 0, "untrusted", problem.reason))
        findings.append(
            Finding(f"spec {problem.file}", Status.FAIL, problem.reason, _trust_fix(problem.file))
        )
    unusable = [
        p
        for p in registry.problems
        if p.file not in loaded and not p.field.startswith("devices[") and not untrusted(p)
    ]
    for path in sorted({p.file for p in unusable}):
        kind = _declared_kind(path)
        reason = next(str(p) for p in unusable if p.file == path)
        states.append(SpecState(path, kind, 0, "invalid", reason))
        label = f"spec {path}"
        if kind == check.kind:
            findings.append(Finding(label, Status.FAIL, f"invalid: {reason}", check.regenerate(path)))
        else:
            detail = f"invalid, not a {check.kind} spec: {reason}"
            findings.append(
                Finding(
                    label,
                    Status.WARN,
                    detail,
                    f"fix or remove it ({shlex.join(['cdictk', 'cdi', 'validate', path])})",
                )
            )
    for spec_file in registry.spec_files:
        state = _check(spec_file.path, spec_file.spec, check)
        states.append(state)
        if state.status == "unsafe":  # any kind: a CDI-native engine mounts it as root
            findings.append(
                Finding(f"spec {state.path}", Status.FAIL, state.reason, _unsafe_fix(state, check))
            )
            continue
        if state.kind != check.kind:
            continue
        label = f"spec {state.path}"
        if state.status == "stale":
            fix = check.regenerate(state.path)
            findings.append(Finding(label, Status.FAIL, f"stale: {state.reason}", fix))
        else:
            findings.append(Finding(label, Status.OK, f"{state.devices} devices, {state.reason}"))
    ours = f'"{check.kind}='
    conflicts = [p for p in registry.problems if "conflicting device" in p.reason and ours in p.reason]
    if conflicts:
        files = ", ".join(sorted({p.file for p in conflicts}))
        detail = f"{len(conflicts)} device definitions in more than one file ({files}): runtimes drop them"
        findings.append(Finding("specs", Status.FAIL, detail, f"keep one of {files} and remove the others"))
    if not any(state.kind == check.kind and state.status != "invalid" for state in states):
        target = os.path.join(dirs[-1], "nvidia.yaml") if dirs else "/var/run/cdi/nvidia.yaml"
        detail = f"no usable {check.kind} spec in {', '.join(dirs)}: CDI runtimes cannot give GPUs"
        findings.append(Finding("specs", Status.FAIL, detail, check.regenerate(target)))
    return states, findings


def _trust_fix(path: str) -> str:
    """Make it root's if its content is yours, else remove it: what a planted file calls for."""
    commands = " && ".join(shlex.join(command) for command in repairs(path))
    if os.path.isdir(path):
        return commands
    removal = shlex.join(["rm", path])
    return f"{commands}, if you wrote it; else {removal}" if commands else removal


def _declared_kind(path: str) -> str:
    """The kind an unusable file says it is, if it parses that far."""
    try:
        document = read_document(path)
    except CdictkError:
        return ""
    kind = document.get("kind") if isinstance(document, dict) else None
    return kind if isinstance(kind, str) else ""


def _check(path: str, spec: Spec, check: SpecCheck) -> SpecState:
    count = len(spec.devices)
    unsafe = _foreign_paths(spec, path, check.host_root)
    if unsafe:
        return SpecState(path, spec.kind, count, "unsafe", unsafe)
    if spec.kind != check.kind:
        return SpecState(path, spec.kind, count, "current", "another kind")
    reasons = _node_problems(spec, check.host_root)
    if check.facts is not None:
        reasons += _device_set_problems(spec, check.facts)
    if reasons:
        return SpecState(path, spec.kind, count, "stale", "; ".join(reasons))
    try:
        with open(path, "rb") as handle:
            same = check.fresh is not None and handle.read() == check.fresh
    except OSError:
        same = False
    if same:
        return SpecState(path, spec.kind, count, "current", "as cdictk cdi generate writes it now")
    return SpecState(path, spec.kind, count, "differs", "usable, but not what cdictk cdi generate writes now")


def _foreign_paths(spec: Spec, path: str, host_root: str) -> str:
    """What of ``spec`` is mounted from host paths others could change ("" when nothing is)."""
    if host_root != "/":
        return ""  # the specs' host paths are the node's, seen elsewhere: not judged from here
    problems = spec_problems(spec, path)
    if not problems:
        return ""
    shown = _shown([problem.reason.split(": cdictk refuses")[0] for problem in problems])
    return f"mounts host paths someone other than root could change: {shown}"


def _unsafe_fix(state: SpecState, check: SpecCheck) -> str:
    if state.kind == check.kind:
        return f"make those paths root's, or {check.regenerate(state.path)} (it leaves them out)"
    return "make those paths root's, or remove the spec"


def _edits(spec: Spec) -> list[ContainerEdits]:
    return [spec.container_edits, *(device.container_edits for device in spec.devices)]


def _shown(items: list[str]) -> str:
    more = f" and {len(items) - MAX_SHOWN} more" if len(items) > MAX_SHOWN else ""
    return ", ".join(items[:MAX_SHOWN]) + more


def _node_problems(spec: Spec, host_root: str) -> list[str]:
    gone: list[str] = []
    renumbered: list[str] = []
    for edits in _edits(spec):
        for node in edits.device_nodes:
            host_path = node.host_path or node.path
            described = node.type != "" and (node.major != 0 or node.type == "p")
            try:
                st = os.lstat(join(host_root, host_path))
            except OSError:
                if not described and host_path not in gone:
                    gone.append(host_path)
                continue
            if (
                stat.S_ISCHR(st.st_mode)
                and node.major
                and (node.major, node.minor)
                != (
                    os.major(st.st_rdev),
                    os.minor(st.st_rdev),
                )
            ):
                numbers = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
                found = f"{host_path} is {numbers}, not {node.major}:{node.minor}"
                if found not in renumbered:
                    renumbered.append(found)
        for mount in edits.mounts:
            path = mount.host_path
            if path.startswith("/") and not os.path.lexists(join(host_root, path)) and path not in gone:
                gone.append(path)
    problems = []
    if gone:
        problems.append(f"names host paths that are gone: {_shown(gone)}")
    if renumbered:
        problems.append(f"device numbers changed: {_shown(renumbered)}")
    return problems


def _device_set_problems(spec: Spec, facts: NodeFacts) -> list[str]:
    """Against the node's GPUs and MIG devices, when the spec names devices by UUID."""
    names = {device.name for device in spec.devices}
    named = {name for name in names if name.startswith(("GPU-", "MIG-"))}
    if not named:
        return []  # named another way: nothing to compare
    node = [gpu.uuid for gpu in facts.gpus if not gpu.mig_enabled]
    node += [mig.uuid for gpu in facts.gpus for mig in gpu.migs]
    problems = []
    lacking = [uuid for uuid in node if uuid not in names]
    if lacking:
        problems.append(f"lacks devices the node has: {_shown(lacking)}")
    extra = sorted(named - set(node))
    if extra:
        problems.append(f"names devices the node no longer has: {_shown(extra)}")
    return problems
