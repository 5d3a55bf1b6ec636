"""The spec dirs scanned into their index, in the stored form that
:meth:`cdictk.startpath.specs.index.SpecIndex.from_data` reads: the registry's spec files (path, kind,
their own container edits in the spec's JSON shape), its devices by qualified name (their spec as a
number into the specs, their position there, edits and annotations) and its problems, all with named
fields.

The one way from the spec files to the index: a start whose stored index missed, a view scanned once
(``cdictk cdi list/validate/inject``) and each scan of a view kept current
(:class:`cdictk.cdi.specview.SpecDirs`, through :mod:`cdictk.cdi.rescan`) all come here. Plain data,
so that the start path's index, which imports this module where its cache misses, is not imported back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdictk.cdi.dump import to_data
from cdictk.cdi.model import Spec
from cdictk.cdi.registry import Registry, load_registry


def scan(dirs: Sequence[str], *, require_dirs: bool, trusted_only: bool) -> dict[str, Any]:
    """The index of ``dirs``, every spec file parsed now."""
    return index_data(load_registry(dirs, require_dirs=require_dirs, trusted_only=trusted_only))


def index_data(registry: Registry) -> dict[str, Any]:
    """The registry's spec files, devices and problems as the index stores them."""
    numbers: dict[int, int] = {}
    specs: list[dict[str, Any]] = []
    for spec_file in registry.spec_files:
        numbers[id(spec_file)] = len(specs)
        edits = to_data(spec_file.spec.container_edits)
        specs.append({"path": spec_file.path, "kind": spec_file.spec.kind, "edits": edits})
    devices = {
        name: {
            "spec": numbers[id(found.spec_file)],
            "index": found.index,
            "edits": to_data(found.device.container_edits),
            "annotations": dict(found.device.annotations),
        }
        for name, found in registry.devices.items()
    }
    problems = [{"file": p.file, "field": p.field, "reason": p.reason} for p in registry.problems]
    return {"specs": specs, "devices": devices, "problems": problems}


def spec_data(spec: Spec) -> list[Any]:
    """``[kind, common edits, [[device name, edits], ...]]`` as plain data: what the parse cache holds
    of a spec made in memory, and what :meth:`SpecIndex.with_spec_data` takes."""
    return [
        spec.kind,
        to_data(spec.container_edits),
        [[d.name, to_data(d.container_edits)] for d in spec.devices],
    ]
