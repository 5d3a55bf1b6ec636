"""The labels worked out and written, once or for as long as the node runs (``--watch``).

``--watch`` follows the node as ``cdictk cdi generate --watch`` does (:mod:`cdictk.nvcdi.watch`): every
``interval`` seconds the node's fingerprint (driver, modules, GPUs, MIG instances, device nodes), the
settings file's and the output's own stat are compared with the last ones, and the labels are worked
out again (NVML asked anew) when one changed, and every ``full_every`` seconds whatever they say. A MIG
reconfiguration, a driver upgrade, a GPU gone or a ConfigMap update is in the file within two seconds;
NVIDIA's feature discovery instead asks NVML every 60 seconds, changed or not.

With an expiry the file carries ``# +expiry-time=``, renewed once half of it has passed, so that labels
outlive a writer killed without cleanup by at most that long. A watch that is stopped (SIGTERM, SIGINT)
removes the file, as GFD does: its labels leave the node at NFD's next look.
"""

from __future__ import annotations

import datetime
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cdictk.labels import featurefile
from cdictk.labels.gfdrules import DOMAIN, Labels, Sharing, node_labels
from cdictk.labels.nodeview import read_node
from cdictk.nvcdi.specfile import Stamp, path_stamp
from cdictk.nvcdi.watch import FatalWatchError, WatchTiming, watch
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots
from cdictk.startpath.specs.fingerprint import node_fingerprint

TIMESTAMP = f"{DOMAIN}/gfd.timestamp"
FULL_EVERY = 300.0  # seconds between workings-out when nothing seems to change


@dataclass(frozen=True, slots=True)
class LabelOptions:
    mig_strategy: str = "none"
    sharing: Sharing = field(default_factory=Sharing)
    timestamp: int | None = None  # seconds since the epoch for gfd.timestamp; None: not written


@dataclass(frozen=True, slots=True)
class Made:
    labels: Labels
    warnings: tuple[str, ...]


def make_labels(roots: Roots, options: LabelOptions) -> Made:
    """The node's labels now; a CdictkError when they cannot be worked out (no NVML, no GPU)."""
    view = read_node(roots)
    labels = node_labels(view, options.mig_strategy, options.sharing)
    if options.timestamp is not None:
        labels[TIMESTAMP] = str(options.timestamp)
    return Made(labels, view.warnings)


class WatchedLabels:
    """The feature file ``--watch`` keeps: what its fingerprint is made of, and one working-out."""

    def __init__(
        self,
        produce: Callable[[], Made],
        *,
        roots: Roots,
        output: str,
        expiry: float | None,
        say: Callable[[str], None],
        warn: Callable[[str], None],
        inputs: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._produce = produce
        self._roots = roots
        self._output = output
        self._expiry = expiry
        self._say = say
        self._warn = warn
        self._inputs = inputs  # files beside the node's that the labels come from: the settings file
        self._clock = clock
        self._shown: tuple[str, ...] = ()
        self._labels: Labels | None = None
        self._expires: float | None = None
        self._written: Stamp | None = None  # the output as we last wrote or read it

    @property
    def full_every(self) -> float:
        """Often enough to renew the expiry in time."""
        return FULL_EVERY if self._expiry is None else min(FULL_EVERY, self._expiry / 4)

    def wrote_last(self) -> bool:
        """Whether the output is still the file this watch last wrote (or found right)."""
        return self._written is not None and path_stamp(self._output) == self._written

    def fingerprint(self) -> object:
        # The output's own stamp: a file removed or changed by someone else is put back.
        stamp = path_stamp(self._output)
        return node_fingerprint(self._roots, self._inputs), "ours" if stamp == self._written else stamp

    def regenerate(self) -> None:
        made = self._produce()
        if made.warnings != self._shown:  # once, not every time the node is looked at
            self._shown = made.warnings
            for message in made.warnings:
                self._warn(message)
        try:
            on_disk = featurefile.current(self._output)
        except CdictkError as exc:  # a link, a directory, a FIFO: waiting will not change it
            raise FatalWatchError(exc.problem.file, exc.problem.field, exc.problem.reason) from exc
        expires = self._expiry_for(made.labels)
        when = None if expires is None else datetime.datetime.fromtimestamp(expires, datetime.UTC)
        written, stamp = featurefile.update(self._output, featurefile.render(made.labels, when), on_disk)
        if written:
            self._say(f"wrote {self._output} ({len(made.labels)} labels)")
        self._labels, self._expires, self._written = made.labels, expires, stamp

    def _expiry_for(self, labels: Labels) -> float | None:
        """The expiry written last while it has more than half its time left and the labels are the
        same, else a new one (whole seconds: the file says no more)."""
        if self._expiry is None:
            return None
        now = self._clock()
        if labels == self._labels and self._expires is not None and now < self._expires - self._expiry / 2:
            return self._expires
        return float(int(now + self._expiry))


def watch_labels(watched: WatchedLabels, *, output: str, interval: float, say: Callable[[str], None]) -> None:
    """Keep ``output`` current until SIGTERM or SIGINT, then remove it."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    say(f"watching the node every {interval:g} s for {output}")
    timing = WatchTiming(interval, watched.full_every)
    try:
        watch(watched.fingerprint, watched.regenerate, stop.wait, timing, say, what="feature file")
    finally:
        # Only the file as we left it: one someone else put there (or a link) is theirs.
        if watched.wrote_last() and featurefile.remove(output):
            say(f"removed {output}: its labels leave the node at NFD's next look")
    say(f"stopped watching for {output}")
