"""The watch loop: generate when the fingerprint moves, back off on failures, stop when asked."""

from __future__ import annotations

from cdictk.nvcdi.watch import MAX_BACKOFF, WatchTiming, watch
from cdictk.startpath.helpers.errors import CdictkError


class Script:
    """Fingerprints to return tick by tick, and what happened."""

    def __init__(self, prints: list[object], failures: set[int] | None = None) -> None:
        self.prints = prints
        self.failures = failures or set()
        self.tick = 0
        self.generated: list[int] = []
        self.logged: list[str] = []
        self.waits: list[float] = []

    def fingerprint(self) -> object:
        return self.prints[self.tick]

    def regenerate(self) -> None:
        self.generated.append(self.tick)
        if self.tick in self.failures:
            raise CdictkError("", "", f"no driver at tick {self.tick}")

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.tick += 1
        return self.tick >= len(self.prints)

    def run(self, timing: WatchTiming | None = None) -> None:
        timing = timing or WatchTiming(interval=1.0, full_every=1e9)
        watch(self.fingerprint, self.regenerate, self.wait, timing, self.logged.append)


def test_generates_first_and_then_only_on_a_change() -> None:
    script = Script(["a", "a", "a", "b", "b", "a"])
    script.run()
    assert script.generated == [0, 3, 5]
    assert script.waits == [1.0] * 6 and script.logged == []


def test_full_generation_even_without_a_change() -> None:
    script = Script(["a"] * 5)
    script.run(WatchTiming(interval=0.1, full_every=0.0))
    assert script.generated == [0, 1, 2, 3, 4]


def test_a_failure_is_logged_once_retried_and_its_recovery_said() -> None:
    script = Script(["a", "b", "c", "c", "d"], failures={0, 1, 2})
    script.run(WatchTiming(interval=1.0, full_every=1e9))
    assert script.generated == [0, 1, 2, 4]  # c failed; unchanged c waits for the back-off
    assert script.logged == [
        "spec not updated, the one there stays; trying again: no driver at tick 0",
        "the spec is updated again",
    ]


def test_the_back_off_is_capped() -> None:
    assert MAX_BACKOFF == 30.0
    script = Script(["a"] * 3, failures={0, 1, 2})
    script.run(WatchTiming(interval=0.0, full_every=1e9))  # a zero back-off retries every tick
    assert script.generated == [0, 1, 2] and len(script.logged) == 1


def test_a_fatal_error_ends_the_watch() -> None:
    import pytest

    from cdictk.nvcdi.watch import FatalWatchError

    def regenerate() -> None:
        raise FatalWatchError("/run/cdi/nvidia.yaml", "", "not a regular file")

    with pytest.raises(FatalWatchError):
        watch(lambda: 1, regenerate, lambda _: False, WatchTiming(), print)
