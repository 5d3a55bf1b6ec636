"""Fitting a spec to an older CDI reader: ``--cdi-version 0.5.0`` for podman 4.3 and containerd 1.7.

Only what a reader can do without is dropped, each with a warning: the extra group IDs of group-owned
nodes (0.7.0; root in the container opens the nodes anyway) and annotations (0.6.0). Anything else the
target cannot express (digit-first device names and host paths before 0.5.0, a dotted class before
0.6.0) is an error, since a spec without it would be wrong rather than poorer.
"""

from __future__ import annotations

from cdictk.cdi.model import Spec
from cdictk.cdi.version import KNOWN_VERSIONS, is_newer, minimum_version
from cdictk.startpath.helpers.errors import CdictkError

_ANNOTATIONS = "0.6.0"
_GIDS = "0.7.0"


def fit_version(spec: Spec, target: str) -> list[str]:
    """Lower ``spec.cdi_version`` to at most ``target``, dropping what must go; the warnings."""
    target = target.removeprefix("v")
    if target not in KNOWN_VERSIONS:
        raise CdictkError(
            "", "--cdi-version", f"unknown version {target!r} (known: {', '.join(KNOWN_VERSIONS[2:])})"
        )
    warnings: list[str] = []
    every = [spec.container_edits, *(device.container_edits for device in spec.devices)]
    if is_newer(_GIDS, target) and any(edits.additional_gids for edits in every):
        for edits in every:
            edits.additional_gids = []
        warnings.append(
            f"cdiVersion {target} has no additionalGids: left out, so only root in the container can open "
            "group-owned nodes such as /dev/dri/renderD*"
        )
    if is_newer(_ANNOTATIONS, target) and (spec.annotations or any(d.annotations for d in spec.devices)):
        spec.annotations = {}
        for device in spec.devices:
            device.annotations = {}
        warnings.append(f"cdiVersion {target} has no annotations: left out")
    needed = minimum_version(spec)
    if is_newer(needed, target):
        raise CdictkError(
            "",
            "--cdi-version",
            f"the spec needs cdiVersion {needed} (device names starting with a digit, "
            f"host paths of device nodes or a dotted class), which {target} cannot express",
        )
    spec.cdi_version = needed
    return warnings
