"""Everything ``cdictk info`` looks at, gathered once, printed as a table or as JSON."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from cdictk.info.checks import Finding, NodeReport, Status
from cdictk.info.enginestate import check_engines
from cdictk.info.platforms import check_node
from cdictk.info.specs import SpecCheck, SpecState, check_specs
from cdictk.node.modes import Mode
from cdictk.nvcdi.hooks import hook_program
from cdictk.nvcdi.nodespec import LEFT_OUT, node_spec
from cdictk.nvcdi.options import SpecOptions
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots
from cdictk.trustscan import repairs


@dataclass(slots=True)
class InfoReport:
    roots: Roots
    node: NodeReport
    specs: list[SpecState] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(finding.status is Status.FAIL for finding in self.findings)


def gather(roots: Roots, spec_dirs: list[str], kind: str, host_root: str) -> InfoReport:
    node = check_node(roots)
    fresh, left_out = _fresh_spec(roots, node, kind, host_root)
    check = SpecCheck(
        kind, node.facts, fresh, host_root, ("cdictk", "cdi", "generate", *root_flags(roots, host_root))
    )
    specs, spec_findings = check_specs(spec_dirs, check)
    findings = [*node.findings, *_left_out_findings(left_out), *spec_findings, *check_engines(host_root)]
    return InfoReport(roots, node, specs, findings)


def root_flags(roots: Roots, host_root: str = "/") -> list[str]:
    """The root options info was given, for the commands it suggests (none when all are defaults)."""
    flags = []
    if roots.driver != "/":
        flags += ["--driver-root", roots.driver]
    if roots.dev != roots.driver:
        flags += ["--dev-root", roots.dev]
    if roots.proc != "/proc":
        flags += ["--proc-root", roots.proc]
    if roots.sys != "/sys":
        flags += ["--sys-root", roots.sys]
    if host_root != "/":
        flags += ["--host-root", host_root]
    return flags


def _fresh_spec(roots: Roots, node: NodeReport, kind: str, host_root: str) -> tuple[bytes | None, list[str]]:
    """What ``cdictk cdi generate`` writes now with its defaults (None without GPUs), and the host paths
    it leaves out because someone other than root could change them."""
    if node.facts is None:
        return None, []

    vendor, _, cls = kind.partition("/")
    try:
        options = SpecOptions(vendor=vendor, cls=cls, hook_program=hook_program())
        made = node_spec(roots, Mode.AUTO, options, where="<fresh>", host_root=host_root, facts=node.facts)
        left_out = [line for line in made.warnings if line.endswith(LEFT_OUT)]
        return made.dump("yaml"), left_out
    except CdictkError:
        return None, []


def _left_out_findings(lines: list[str]) -> list[Finding]:
    """A warning for each host path generate leaves out (a user's /tmp/nvidia-mps: MPS clients in
    containers then find no daemon), with what would make it root's or remove it."""
    findings = []
    for line in lines:
        path = line.split(": ", 1)[0]
        commands = " && ".join(shlex.join(command) for command in repairs(path, owners=frozenset({0})))
        fix = f"{commands}, if it is the node's; else {shlex.join(['rm', '-r', path])}" if commands else ""
        findings.append(Finding("host paths", Status.WARN, line, fix))
    return findings


def to_json(report: InfoReport) -> dict[str, Any]:
    facts = report.node.facts
    gpus = []
    if facts is not None:
        for gpu in facts.gpus:
            gpus.append(
                {
                    "index": gpu.index,
                    "minor": gpu.minor,
                    "uuid": gpu.uuid,
                    "bus_id": gpu.bus_id,
                    "name": gpu.name,
                    "mig_enabled": gpu.mig_enabled,
                    "mig_devices": [
                        {"index": f"{gpu.index}:{mig.index}", "uuid": mig.uuid, "profile": mig.profile}
                        for mig in gpu.migs
                    ],
                }
            )
    return {
        "ok": report.ok,
        "roots": report.roots.as_dict(),
        "platform": report.node.platform,
        "driver_version": report.node.driver_version,
        "modules": report.node.modules,
        "device_nodes": {"expected": report.node.nodes_expected, "missing": report.node.nodes_missing},
        "gpus": gpus,
        "specs": [asdict(state) for state in report.specs],
        "findings": [
            {"check": f.check, "status": f.status.value.lower(), "detail": f.detail, "fix": f.fix}
            for f in report.findings
        ],
    }


def to_table(report: InfoReport) -> str:
    width = max([len(f.check) for f in report.findings] + [5])
    lines = [f"{'CHECK':<{width}}  {'STATUS':<6}  DETAIL"]
    lines += [f"{f.check:<{width}}  {f.status.value:<6}  {f.detail}" for f in report.findings]
    fixes = [f for f in report.findings if f.status is not Status.OK and f.fix]
    if fixes:
        lines.append("")
        lines += [f"fix ({f.check}): {f.fix}" for f in fixes]
    failed = sum(f.status is Status.FAIL for f in report.findings)
    lines.append("")
    lines.append(
        "GPU containers should start."
        if report.ok
        else f"{failed} problem(s) would make GPU containers fail."
    )
    return "\n".join(lines)
