"""Spec directories -> the devices a runtime would see, as model objects: the slow builder.

:class:`cdictk.cdi.specview.SpecDirs`, the one view of the spec dirs, is built from a registry; only
what needs each file's whole spec (``cdictk info``) reads the registry itself.

As in the reference library: directories in priority order (a later one wins), in each only ``*.json``
and ``*.yaml`` files, in lexical order, no recursion; a bad file only loses its own devices; two files
of the same directory that define the same device both get a problem and the device is dropped.

Two differences, both deliberate. An unreadable directory is a problem of its own and the remaining
directories are still read (the Go library stops scanning there). And a same-directory conflict only
drops the device when no later directory defines it: the Go library drops it even when
``/var/run/cdi`` holds a clean override, which hides a device the operator did define.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cdictk.cdi.fusemounts import FuseMounts
from cdictk.cdi.load import InvalidSpecError, load_spec
from cdictk.cdi.model import Device, Spec
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.specs.names import QualifiedName, split_kind
from cdictk.startpath.specs.specdirs import spec_paths

# The CDI reference library's default spec dirs, a later one winning: what the commands and the
# library read when given none (the runtime's settings default to the same two)
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True, slots=True, eq=False)
class SpecFile:
    path: str
    priority: int
    spec: Spec


@dataclass(frozen=True, slots=True)
class RegisteredDevice:
    name: QualifiedName
    device: Device
    index: int  # position in the spec's devices, for messages
    spec_file: SpecFile


@dataclass(slots=True)
class Registry:
    dirs: tuple[str, ...]
    spec_files: list[SpecFile] = field(default_factory=list)
    devices: dict[str, RegisteredDevice] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def load_registry(
    dirs: Sequence[str] = DEFAULT_SPEC_DIRS, *, require_dirs: bool = False, trusted_only: bool = True
) -> Registry:
    """Load every spec in ``dirs``. A missing directory is silent unless ``require_dirs``; a spec that
    someone other than root could change is skipped unless not ``trusted_only``."""
    return read_registry(dirs, load_spec, require_dirs=require_dirs, trusted_only=trusted_only)


def read_registry(
    dirs: Sequence[str], load: Callable[[str], Spec], *, require_dirs: bool = False, trusted_only: bool = True
) -> Registry:
    """:func:`load_registry` with ``load`` reading each file: a view kept current passes one that keeps
    what it read while a file stays the same (:mod:`cdictk.cdi.rescan`)."""
    registry = Registry(tuple(os.path.normpath(directory) for directory in dirs))
    # qualified name -> priority -> every definition of it at that priority
    definitions: dict[str, dict[int, list[RegisteredDevice]]] = {}
    mounts = FuseMounts()  # the mount table read once per scan
    for priority, directory in enumerate(registry.dirs):
        for path in spec_paths(
            directory, registry.problems, require_dirs=require_dirs, trusted_only=trusted_only, mounts=mounts
        ):
            try:
                spec = load(path)
            except InvalidSpecError as exc:
                registry.problems.extend(exc.problems)
                continue
            except CdictkError as exc:
                registry.problems.append(exc.problem)
                continue
            spec_file = SpecFile(path, priority, spec)
            registry.spec_files.append(spec_file)
            vendor, cls = split_kind(spec.kind)
            for index, device in enumerate(spec.devices):
                name = QualifiedName(vendor, cls, device.name)
                levels = definitions.setdefault(str(name), {})
                levels.setdefault(priority, []).append(RegisteredDevice(name, device, index, spec_file))

    for qualified, levels in definitions.items():
        for found in levels.values():
            if len(found) > 1:
                _report_conflict(qualified, found, registry.problems)
        winners = levels[max(levels)]
        if len(winners) == 1:
            registry.devices[qualified] = winners[0]
    return registry


def _report_conflict(qualified: str, found: list[RegisteredDevice], problems: list[Problem]) -> None:
    for registered in found:
        others = ", ".join(other.spec_file.path for other in found if other is not registered)
        problems.append(
            Problem(
                registered.spec_file.path,
                f"devices[{registered.index}]",
                f'conflicting device "{qualified}" (also defined in {others})',
            )
        )
