"""The spec dirs scanned into their index: the registry's devices, their specs' common edits and its
problems as the records of :class:`cdictk.startpath.specs.index.SpecIndex`.

The one way from the spec files to the index: a start whose stored index missed, a view scanned once
(``cdictk cdi list/validate/inject``) and each scan of a view kept current
(:class:`cdictk.cdi.specview.SpecDirs`, through :mod:`cdictk.cdi.rescan`) all come here.
"""

from __future__ import annotations

from typing import Any

from cdictk.cdi.dump import to_data
from cdictk.cdi.model import Spec
from cdictk.cdi.registry import Registry, load_registry
from cdictk.startpath.specs.index import DeviceRecord, SpecIndex, SpecRecord


def scan(dirs: tuple[str, ...], *, require_dirs: bool, trusted_only: bool) -> SpecIndex:
    """The index of ``dirs`` (spelled as :func:`~cdictk.startpath.specs.index.spec_dir_names` gives
    them), every spec file parsed now."""
    return index_of(load_registry(dirs, require_dirs=require_dirs, trusted_only=trusted_only), dirs)


def index_of(registry: Registry, dirs: tuple[str, ...]) -> SpecIndex:
    """The registry's devices, their specs' common edits and its problems as records."""
    records: dict[int, SpecRecord] = {}
    specs: list[SpecRecord] = []
    for spec_file in registry.spec_files:
        record = SpecRecord(spec_file.path, spec_file.spec.kind, to_data(spec_file.spec.container_edits))
        records[id(spec_file)] = record
        specs.append(record)
    devices = {
        name: DeviceRecord(
            records[id(found.spec_file)],
            found.index,
            to_data(found.device.container_edits),
            dict(found.device.annotations),
        )
        for name, found in registry.devices.items()
    }
    return SpecIndex(dirs, specs, devices, list(registry.problems))


def spec_data(spec: Spec) -> list[Any]:
    """``[kind, common edits, [[device name, edits], ...]]`` as plain data: what the parse cache holds
    of a spec made in memory, and what :meth:`SpecIndex.with_spec_data` takes."""
    return [
        spec.kind,
        to_data(spec.container_edits),
        [[d.name, to_data(d.container_edits)] for d in spec.devices],
    ]
