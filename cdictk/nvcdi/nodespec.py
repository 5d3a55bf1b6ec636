"""The one way to a node's CDI spec: discover the node, build the spec, check it, dump it.

``cdictk cdi generate`` (once or ``--watch``), the runtime shim's spec made in memory for a node
without one on disk, and ``cdictk info`` (is the spec on disk current?) all come here, so none of them
can hand a runtime a spec that the checks would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdictk.cdi.dump import dump
from cdictk.cdi.model import Spec
from cdictk.cdi.rules import check_spec
from cdictk.errors import CdictkError
from cdictk.node.csvfiles import CsvSource
from cdictk.node.facts import NodeFacts, discover
from cdictk.node.modes import Mode
from cdictk.node.nvml import NvmlQuery
from cdictk.node.roots import Roots
from cdictk.nvcdi.build import build_spec
from cdictk.nvcdi.hostroot import strip_host_root
from cdictk.nvcdi.options import SpecOptions


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
    strip_host_root(spec, host_root)
    problems = check_spec(spec, where)
    if problems:
        raise CdictkError("", "", f"generated spec is invalid: {problems[0]}")
    return NodeSpec(spec, found, found.warnings + warnings)
