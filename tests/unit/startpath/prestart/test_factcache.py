"""The legacy prestart hook's driver facts kept in the parse cache: a hit asks NVML nothing, a changed
node (its fingerprint) or library (its identity) misses, an entry of any other shape is a miss, and
only complete facts are kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from cdictk.entrypoints.slowpath import slow_path
from cdictk.runtime import driverfacts
from cdictk.startpath.prestart.factcache import KIND, NvmlFactsError, driver_facts
from cdictk.startpath.prestart.factshape import shaped
from cdictk.startpath.prestart.require import Facts, GpuFacts
from cdictk.startpath.specs import fingerprint
from cdictk.startpath.specs.parsecache import ParseCache, entry_name
from tests.fakenode.nvml import build_fake_nvml
from tests.unit.runtime.test_driverfacts import VERSION, config

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build the fake NVML")

KEYS = ("cuda", "driver", "arch", "brand")
READ = slow_path().driver_facts  # the entry points' slow path: NVML asked in a child


@pytest.fixture
def lib(tmp_path: Path, stub_cache: str) -> str:
    """A fake libnvidia-ml of this test's own, with test_driverfacts' config (four GPUs) beside it."""
    path = build_fake_nvml(str(tmp_path / "lib"), VERSION, cache_dir=stub_cache)
    config().write(os.path.dirname(path))
    return path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The slow path's reads of NVML, by library asked."""
    done: list[str] = []
    real = driverfacts.read_facts

    def counted(mounted: str, **kwargs: Any) -> dict[str, Any]:
        done.append(mounted)
        return real(mounted, **kwargs)

    monkeypatch.setattr(driverfacts, "read_facts", counted)
    return done


@pytest.fixture
def cache(tmp_path: Path) -> ParseCache:
    return ParseCache(str(tmp_path / "cache"))


def entry(cache: ParseCache, lib: str) -> Path:
    assert cache.directory is not None
    return Path(cache.directory) / (entry_name(KIND, lib) + ".json")


def test_the_facts_are_read_once_then_kept(lib: str, cache: ParseCache, reads: list[str]) -> None:
    first = driver_facts(cache, lib, [0, 3], KEYS, read=READ)
    assert first == Facts("13.0", VERSION, [GpuFacts("9.0", "nvidia", 0), GpuFacts("7.0", "tesla", 3)])
    config(cuda_version=12040).write(os.path.dirname(lib))  # NVML would say otherwise now
    assert driver_facts(cache, lib, [0, 3], KEYS, read=READ) == first  # one JSON read: NVML not asked
    assert driver_facts(cache, lib, [5], ["arch"], read=READ) == Facts(
        gpus=[GpuFacts("8.6", "", 5)]
    )  # every GPU kept
    assert reads == [lib]
    assert driver_facts(cache, lib, [], [], read=READ) == Facts() and reads == [
        lib
    ]  # no requirement: nothing at all


def test_a_changed_fingerprint_misses(
    lib: str, cache: ParseCache, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fingerprint.node_fingerprint
    driver_facts(cache, lib, [], ["cuda"], read=READ)
    config(cuda_version=12040).write(os.path.dirname(lib))
    # a driver upgrade, a GPU added, a MIG change: the node's fingerprint moves
    monkeypatch.setattr(fingerprint, "node_fingerprint", lambda roots: (*real(roots), "changed"))
    assert driver_facts(cache, lib, [], ["cuda"], read=READ).cuda == "12.4"
    assert driver_facts(cache, lib, [], ["cuda"], read=READ).cuda == "12.4"
    assert len(reads) == 2


def test_a_changed_library_misses(lib: str, cache: ParseCache, reads: list[str]) -> None:
    driver_facts(cache, lib, [], ["driver"], read=READ)
    os.utime(lib)  # rewritten (or chowned, chmodded: its change time moves)
    driver_facts(cache, lib, [], ["driver"], read=READ)
    assert len(reads) == 2


@pytest.mark.parametrize(
    "change",
    [
        lambda kept: [kept],
        lambda kept: {**kept, "cuda": "13.0"},
        lambda kept: {**kept, "gpus": [[0, "9.0", "", "nvidia"]]},
        lambda kept: {**kept, "gpus": [["0", "9.0", "", "nvidia", ""]]},
        lambda kept: {**kept, "gpus": [[True, "9.0", "", "nvidia", ""]]},
        lambda kept: {**kept, "identity": kept["identity"][:4]},
        lambda kept: {**kept, "library": "relative.so"},
        lambda kept: {k: v for k, v in kept.items() if k != "gpus_error"},
    ],
    ids=[
        "a list",
        "cuda a string",
        "a short gpu",
        "a minor a string",
        "a minor a bool",
        "short identity",
        "a relative library",
        "no gpus_error",
    ],
)
def test_an_entry_of_another_shape_is_a_miss(
    lib: str, cache: ParseCache, reads: list[str], change: Any
) -> None:
    driver_facts(cache, lib, [0], KEYS, read=READ)
    path = entry(cache, lib)
    stored = json.loads(path.read_text())
    stored["value"] = change(stored["value"])
    path.write_text(json.dumps(stored))
    assert driver_facts(cache, lib, [0], KEYS, read=READ) == Facts(
        "13.0", VERSION, [GpuFacts("9.0", "nvidia", 0)]
    )
    assert len(reads) == 2


def test_partial_facts_serve_their_start_and_are_not_kept(
    lib: str, cache: ParseCache, reads: list[str]
) -> None:
    config(cuda_version=0).write(os.path.dirname(lib))  # the driver's version reads, CUDA's does not
    assert driver_facts(cache, lib, [], ["driver"], read=READ).driver == VERSION
    with pytest.raises(NvmlFactsError, match=r"^NVML reports CUDA version 0$"):
        driver_facts(cache, lib, [], ["cuda"], read=READ)
    assert not entry(cache, lib).exists() and len(reads) == 2


def test_the_shape_of_facts() -> None:
    good = {
        "cuda": ["13.0", ""],
        "driver": ["580", ""],
        "gpus": [[0, "9.0", "", "nvidia", ""]],
        "gpus_error": "",
    }
    assert shaped(good) == good
    assert shaped({**good, "extra": 1}) == good
    for key in good:
        assert shaped({k: v for k, v in good.items() if k != key}) is None
