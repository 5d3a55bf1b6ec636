"""The slow path the entry points hand the start path: each miss reaches its slow function, and each
slow function the code of cdictk it stands for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdictk.entrypoints import slowpath
from cdictk.startpath.helpers.roots import Roots
from cdictk.startpath.misses import Misses
from cdictk.startpath.prestart.factcache import driver_facts
from cdictk.startpath.prestart.require import Facts
from cdictk.startpath.shim.inject import IN_MEMORY
from cdictk.startpath.specs.index import SpecIndex
from cdictk.startpath.specs.parsecache import ParseCache

EMPTY_INDEX: dict[str, Any] = {"specs": [], "devices": {}, "problems": []}
FACTS: dict[str, Any] = {
    "cuda": ["12.4", ""],
    "driver": ["550.1", ""],
    "gpus": [],
    "gpus_error": "",
    "library": "/nonexistent/libnvidia-ml.so.1",
    "identity": [0, 0, 0, 0, 0],
}


def test_the_slow_path_is_the_three_functions() -> None:
    found = slowpath.slow_path()
    assert isinstance(found, Misses)
    assert (found.scan_specs, found.node_spec, found.driver_facts) == (
        slowpath.scan_specs,
        slowpath.node_spec,
        slowpath.driver_facts,
    )


def test_the_index_scans_on_a_miss_alone(tmp_path: Path) -> None:
    """The scan handed in runs when the parse cache misses, and not when it hits."""
    (tmp_path / "cdi").mkdir()
    calls: list[tuple[tuple[str, ...], bool, bool]] = []

    def scan(dirs: tuple[str, ...], require_dirs: bool, trusted_only: bool) -> dict[str, Any]:
        calls.append((dirs, require_dirs, trusted_only))
        return EMPTY_INDEX

    store = ParseCache(str(tmp_path / "cache"))
    for _ in range(2):
        SpecIndex.load([f"{tmp_path}/cdi/"], scan, store, trusted_only=False)
    assert calls == [((f"{tmp_path}/cdi",), False, False)]
    SpecIndex.load([str(tmp_path / "cdi")], scan, require_dirs=True)  # no store: scanned every time
    assert calls[1:] == [((f"{tmp_path}/cdi",), True, True)]


def test_the_driver_facts_are_read_on_a_miss_alone(tmp_path: Path) -> None:
    reads: list[str] = []

    def read(mounted: str) -> dict[str, Any]:
        reads.append(mounted)
        return FACTS

    store = ParseCache(str(tmp_path / "cache"))
    assert driver_facts(store, "/lib/libnvidia-ml.so.1", [], ["cuda"], read=read) == Facts("12.4")
    assert reads == ["/lib/libnvidia-ml.so.1"]


def test_scan_specs_is_the_registrys_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdictk.cdi import scan

    asked: list[Any] = []

    def fake(dirs: tuple[str, ...], *, require_dirs: bool, trusted_only: bool) -> dict[str, Any]:
        asked.append((dirs, require_dirs, trusted_only))
        return EMPTY_INDEX

    monkeypatch.setattr(scan, "scan", fake)
    assert slowpath.scan_specs(("/etc/cdi",), True, False) is EMPTY_INDEX
    assert asked == [(("/etc/cdi",), True, False)]


def test_driver_facts_asks_nvml_in_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdictk.runtime import driverfacts

    monkeypatch.setattr(driverfacts, "read_facts", lambda mounted: {**FACTS, "library": mounted})
    assert slowpath.driver_facts("/x/libnvidia-ml.so.1")["library"] == "/x/libnvidia-ml.so.1"


def test_node_spec_is_the_generated_spec_made_with_nvml_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's child is started before the discovery runs, and handed to it; the spec as the index
    stores it, named as made in memory."""
    from cdictk.cdi import scan
    from cdictk.node import nvml
    from cdictk.nvcdi import nodespec

    events: list[Any] = []

    class Query:
        def __enter__(self) -> Query:
            events.append("nvml started")
            return self

        def __exit__(self, *exc: object) -> None:
            events.append("nvml stopped")

    class Made:
        spec = "the spec"

    def made(roots: Roots, mode: Any, options: Any, *, where: str, nvml: Any) -> Made:
        events.append((roots, mode.name, options.vendor, options.cls, where, isinstance(nvml, Query)))
        return Made()

    monkeypatch.setattr(nvml, "NvmlQuery", Query)
    monkeypatch.setattr(nodespec, "node_spec", made)
    monkeypatch.setattr(scan, "spec_data", lambda spec: [spec])
    roots = Roots("/driver")
    assert slowpath.node_spec(roots, "nvidia.com/gpu") == ["the spec"]
    assert events == [
        "nvml started",
        (roots, "AUTO", "nvidia.com", "gpu", IN_MEMORY, True),
        "nvml stopped",
    ]
