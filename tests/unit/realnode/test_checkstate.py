from __future__ import annotations

from realnode.checkstate import KIND, NodeRuntime, State


def test_each_check_starts_from_nothing_found() -> None:
    first, second = State(work="/tmp/a"), State(work="/tmp/b")
    first.spec_dirs["cdictk"] = "/tmp/a/cdi"
    first.facts["driver"] = "580.159.04"
    assert second.spec_dirs == {} and second.facts == {}
    assert (second.carried, second.venv, second.containers, second.runs) == (None, None, None, False)
    assert second.device == "0" and second.runtime is None


def test_the_node_runtime_is_named_by_its_stable_paths_and_by_current() -> None:
    runtime = NodeRuntime("/w/opt-cdictk", "5837c45dca602371", 39 << 20, 1394)
    assert runtime.stable("cdictk-runtime") == "/w/opt-cdictk/bin/cdictk-runtime"
    assert runtime.current("cdictk-hook") == "/w/opt-cdictk/current/bin/cdictk-hook"


def test_the_kind_is_the_one_both_generators_write() -> None:
    assert KIND == "nvidia.com/gpu"
