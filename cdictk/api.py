"""cdictk as a Python library: per-claim specs for DRA drivers and device plugins, and the spec dirs' view.

The names here are the public surface (``docs/api.md``); everything else in cdictk may change. Three
classes and a few helpers:

- :class:`NodeSpecs`: the node discovered once and kept ``max_age`` seconds; its common edits, a
  device's edits, a whole spec, and a claim's transient spec with devices ``<claim uid>-<id>``.
- :class:`TransientSpecs`: one producer's transient spec files in a spec dir: write, remove, gc, list.
- :class:`SpecDirs`: the spec directories' devices as a runtime resolves them, kept current with
  inotify: devices, errors, and injection into an OCI config by the engine of ``cdictk cdi inject``.

Every failure is a :class:`CdictkError` (or a subclass), whose message is one line. Each class is
safe to share between threads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cdictk.cdi.annotate import update_annotations
from cdictk.cdi.load import InvalidSpecError
from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from cdictk.cdi.rules import check_spec
from cdictk.cdi.specview import ClosedError, SpecDirs
from cdictk.cdi.transient import SpecDirError, SpecExistsError, TransientSpecs, transient_spec_name
from cdictk.cdi.version import minimum_version
from cdictk.node.facts import DiscoveryError
from cdictk.nvcdi.claims import NodeSpecs, UnknownDeviceError
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.specs import annotations as _annotations
from cdictk.startpath.specs import names as _names
from cdictk.startpath.specs.index import UnresolvedDevicesError
from cdictk.startpath.specs.names import QualifiedName

__all__ = [
    "CdictkError",
    "ClosedError",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "DiscoveryError",
    "Hook",
    "InvalidNameError",
    "InvalidSpecError",
    "Mount",
    "NodeSpecs",
    "Problem",
    "QualifiedName",
    "Spec",
    "SpecDirError",
    "SpecDirs",
    "SpecExistsError",
    "TransientSpecs",
    "UnknownDeviceError",
    "UnresolvedDevicesError",
    "annotations_for",
    "check_kind",
    "devices_from_annotations",
    "minimum_version",
    "parse_qualified_name",
    "qualified_name",
    "transient_spec_name",
    "validate",
]


class InvalidNameError(CdictkError, ValueError):
    """A CDI name, annotation key or annotation value that breaks the reference library's rules; also
    a ValueError, which the helpers it wraps raised."""

    def __init__(self, reason: str) -> None:
        super().__init__("", "", reason)


def qualified_name(vendor: str, device_class: str, name: str) -> str:
    """``vendor/class=name``, each part checked."""
    return str(parse_qualified_name(f"{vendor}/{device_class}={name}"))


def parse_qualified_name(text: str) -> QualifiedName:
    """``vendor/class=name`` -> QualifiedName(vendor, cls, name); InvalidNameError when it is not one."""
    try:
        return _names.parse_qualified_name(text)
    except ValueError as exc:
        raise InvalidNameError(str(exc)) from exc


def check_kind(kind: str, *, spec_limits: bool = False) -> str:
    """``kind`` (``vendor/class``) if the reference library accepts it; InvalidNameError saying why not.

    ``spec_limits`` adds the CDI specification's limits, which the library does not check (a vendor
    without "_", at most 253 characters; a class of at most 63): those of a kind a spec is written for.
    """
    problem = _names.kind_problem(kind, spec_limits=spec_limits)
    if problem is not None:
        raise InvalidNameError(problem)
    return kind


def annotations_for(plugin: str, device_id: str, names: Iterable[str]) -> dict[str, str]:
    """The ``cdi.k8s.io/<plugin>_<device id>`` annotation naming ``names``, as a one-entry dict."""
    try:
        return update_annotations(None, plugin, device_id, names)
    except ValueError as exc:
        raise InvalidNameError(str(exc)) from exc


def devices_from_annotations(annotations: Mapping[str, str]) -> list[str]:
    """The CDI device names in ``cdi.k8s.io/`` annotations, keys in sorted order; [] when none."""
    try:
        return _annotations.devices_from_annotations(annotations) or []
    except ValueError as exc:
        raise InvalidNameError(str(exc)) from exc


def validate(spec: Spec) -> None:
    """Check ``spec`` by every rule of the reference library (cdiVersion against its content
    included); InvalidSpecError carries every problem and shows the first."""
    problems = check_spec(spec, "<spec>")
    if problems:
        raise InvalidSpecError(problems)
