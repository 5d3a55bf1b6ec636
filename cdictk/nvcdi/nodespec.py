"""The one way to a node's CDI spec: discover the node, build the spec, check it, dump it.

``cdictk cdi generate`` (once or ``--watch``), the runtime shim's spec made in memory for a node
without one on disk, and ``cdictk info`` (is the spec on disk current?) all come here, so none of them
can hand a runtime a spec that the checks would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdictk.cdi.dump import dump
from cdictk.cdi.model import ContainerEdits, Spec
from cdictk.cdi.rules import check_spec
from cdictk.node.csvfiles import CsvSource
from cdictk.node.facts import NodeFacts, discover
from cdictk.node.modes import Mode
from cdictk.node.nvml import NvmlQuery
from cdictk.nvcdi.build import build_spec
from cdictk.nvcdi.hostroot import strip_host_root
from cdictk.nvcdi.options import SpecOptions
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.hostpaths import LOGIN_DEFS, HostPathCheck
from cdictk.startpath.helpers.roots import Roots, join

LEFT_OUT = "left out of the spec"  # how a warning about a host path others could change ends


@dataclass(frozen=True, slots=True)
class NodeSpec:
    spec: Spec
    facts: NodeFacts
    warnings: list[str]  # discovery's and the builder's, one line each

    @property
    def summary(self) -> str:
        """``cdiVersion 0.7.0, 3 devices, driver 580.95.05`` (no driver where the mode needs none)."""
        spec, driver = self.spec, self.facts.driver_version
        return f"cdiVersion {spec.cdi_version}, {len(spec.devices)} devices" + (
            f", driver {driver}" if driver else ""
        )

    def dump(self, fmt: str) -> bytes:
        """The spec file's bytes, as ``fmt`` (yaml or json)."""

        try:
            return dump(self.spec, fmt).encode()
        except UnicodeEncodeError as exc:  # discovery leaves such names out; this is the last guard
            raise CdictkError("", "", f"a discovered path is not valid UTF-8: {exc.object!r}") from exc


def node_spec(
    roots: Roots,
    mode: Mode,
    options: SpecOptions,
    *,
    where: str = "<generated>",
    host_root: str = "/",
    facts: NodeFacts | None = None,
    csv: CsvSource | None = None,
    nvml: NvmlQuery | None = None,
) -> NodeSpec:
    """The spec this node needs now; ``where`` names it in messages, ``facts`` skips the discovery.

    ``host_root``: where this process sees the node's ``/`` (see :mod:`cdictk.nvcdi.hostroot`).
    ``csv``: the CSV files a Jetson's spec is made from (``--mode csv``; default: L4T's).
    ``nvml``: an NVML query begun by the caller first thing, which discovery asks or closes.
    Raises CdictkError when there is nothing to write (no driver, no GPU) and when the spec would be
    invalid, which is our bug: a runtime must never be handed a spec it refuses.
    """
    found = discover(roots, mode, csv=csv, nvml=nvml) if facts is None else facts
    spec, warnings = build_spec(found, options)
    warnings += leave_out_foreign_paths(spec, found, host_root)
    if not spec.devices:
        raise CdictkError("", "", "no devices to write: " + "; ".join(warnings[-3:]))
    strip_host_root(spec, host_root)
    problems = check_spec(spec, where)
    if problems:
        raise CdictkError("", "", f"generated spec is invalid: {problems[0]}")
    return NodeSpec(spec, found, found.warnings + warnings)


def leave_out_foreign_paths(spec: Spec, facts: NodeFacts, host_root: str = "/") -> list[str]:
    """Remove, in place, every mount and device node whose host path is not root's alone
    (:mod:`cdictk.startpath.helpers.hostpaths`: a user could swap what root mounts), or was found through a
    symlink that is not (``facts``' driver files say which they followed), and every device that loses one; a
    warning line for each. The node's login range is read under ``host_root``."""
    check = HostPathCheck(login_defs=join(host_root, LOGIN_DEFS))
    warnings: list[str] = []

    def refused(edits: ContainerEdits, what: str) -> list[str]:
        found = []
        for path in [node.host_path or node.path for node in edits.device_nodes] + [
            mount.host_path for mount in edits.mounts
        ]:
            problem = check.problem(path)
            if problem is not None:
                shown = problem if problem.startswith(path + ":") else f"{path}: {problem}"
                found.append(f"{shown}; {what}")
        return found

    linked: dict[str, str] = {}  # container path -> the problem of a link followed to its host path
    for driver_file in facts.common.files:
        for link in driver_file.via:
            problem = check.problem(link, follow=False)
            if problem is not None:
                linked.setdefault(driver_file.path, problem)
    kept = []
    for device in spec.devices:
        problems = refused(device.container_edits, f"device {device.name} {LEFT_OUT}")
        warnings += problems
        if not problems:
            kept.append(device)
    spec.devices = kept
    common = spec.container_edits
    problems = refused(common, LEFT_OUT)
    for mount in common.mounts:
        if mount.container_path in linked:
            problems.append(f"{linked[mount.container_path]}: {mount.host_path} {LEFT_OUT}")
    if problems:
        warnings += problems
        common.device_nodes = [n for n in common.device_nodes if check.problem(n.host_path or n.path) is None]
        common.mounts = [
            m for m in common.mounts if m.container_path not in linked and check.problem(m.host_path) is None
        ]
    return warnings
