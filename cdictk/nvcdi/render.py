"""One generation: discover the node, build its spec, check it and serialise it.

``cdictk cdi generate`` runs it once, ``--watch`` whenever the node changes, and ``cdictk info`` to
tell a stale spec from a current one.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdictk.errors import CdictkError
from cdictk.node.facts import Mode, NodeFacts, discover
from cdictk.node.roots import Roots
from cdictk.nvcdi.build import SpecOptions, build_spec


@dataclass(frozen=True, slots=True)
class Rendered:
    data: bytes  # the spec file's bytes
    summary: str  # "cdiVersion 0.7.0, 3 devices, driver 580.95.05"
    warnings: list[str]  # discovery's and the builder's, one line each


def render(
    roots: Roots, mode: Mode, options: SpecOptions, fmt: str, where: str, *, host_root: str = "/"
) -> Rendered:
    """The spec this node needs now, as ``fmt`` (yaml or json); ``where`` names it in messages.

    Raises CdictkError when there is nothing to write (no driver, no GPU) and when the spec would be
    invalid, which is our bug: a runtime must never be handed a spec it refuses.
    """
    return render_facts(discover(roots, mode), options, fmt, where, host_root=host_root)


def render_facts(
    facts: NodeFacts, options: SpecOptions, fmt: str, where: str, *, host_root: str = "/"
) -> Rendered:
    """:func:`render` for facts discovered already.

    ``host_root``: where this process sees the node's ``/`` (see :mod:`cdictk.nvcdi.hostroot`).
    """
    from cdictk.cdi.dump import dump  # noqa: PLC0415
    from cdictk.cdi.rules import check_spec  # noqa: PLC0415
    from cdictk.nvcdi.hostroot import strip_host_root  # noqa: PLC0415

    spec, warnings = build_spec(facts, options)
    strip_host_root(spec, host_root)
    problems = check_spec(spec, where)
    if problems:
        raise CdictkError("", "", f"generated spec is invalid: {problems[0]}")
    try:
        data = dump(spec, fmt).encode()
    except UnicodeEncodeError as exc:  # discovery leaves such names out; this is the last guard
        raise CdictkError("", "", f"a discovered path is not valid UTF-8: {exc.object!r}") from None
    summary = f"cdiVersion {spec.cdi_version}, {len(spec.devices)} devices, driver {facts.driver_version}"
    return Rendered(data, summary, facts.warnings + warnings)
