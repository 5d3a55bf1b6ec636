"""``cdictk cdi generate --watch``: keep a spec current while the node changes.

Every ``interval`` seconds the node's fingerprint (:mod:`cdictk.startpath.specs.fingerprint`, about a
millisecond) is compared with the last one; when it differs, and at least every ``full_every`` seconds
whatever it says, the spec is generated again and written only when its bytes changed. With the
default one-second interval a new GPU, a removed one, a MIG reconfiguration or a driver upgrade is in
the spec within two seconds.

A generation or write that fails (the driver is being upgraded and its module is out, NVML is not
answering, the output's file system is read-only for a while) keeps the spec that is there and is
tried again at the next change, or after a back-off of up to 30 seconds. What cannot get better by
waiting (an output that is not a regular file) is a :class:`FatalWatchError`, which ends the watch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cdictk.startpath.helpers.errors import CdictkError

MAX_BACKOFF = 30.0


class FatalWatchError(CdictkError):
    """A problem waiting cannot fix: the watch ends with it."""


@dataclass(frozen=True, slots=True)
class WatchTiming:
    interval: float = 1.0  # seconds between fingerprints
    full_every: float = 300.0  # seconds between generations even when the fingerprint is unchanged


def watch(
    fingerprint: Callable[[], object],
    regenerate: Callable[[], None],
    wait: Callable[[float], bool],
    timing: WatchTiming,
    log: Callable[[str], None],
    *,
    what: str = "spec",
) -> None:
    """Run until ``wait(seconds)`` returns True (a stop was asked for).

    ``regenerate`` writes the file (``what`` it holds, for the log) when it changed; a CdictkError
    from it is logged and retried, a :class:`FatalWatchError` or anything else propagates.
    """
    last: object = None
    last_run = float("-inf")
    backoff = 0.0
    failed = False
    while True:
        current = fingerprint()
        now = time.monotonic()
        due = current != last or now - last_run >= (backoff if failed else timing.full_every)
        if due:
            last, last_run = current, now
            try:
                regenerate()
            except FatalWatchError:
                raise
            except CdictkError as exc:
                backoff = min(max(backoff * 2, timing.interval), MAX_BACKOFF)
                if not failed:
                    log(f"{what} not updated, the one there stays; trying again: {exc}")
                failed = True
            else:
                if failed:
                    log(f"the {what} is updated again")
                failed, backoff = False, 0.0
        if wait(timing.interval):
            return
