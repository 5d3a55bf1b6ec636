"""Which devices are healthy: Xid events and lost GPUs from NVML, and their recovery.

One implementation for both agents: the device plugin reports the unhealthy devices to the kubelet,
the DRA plugin publishes them with taints (:meth:`HealthMonitor.findings` says what kind of trouble
each has). Each builds a :class:`HealthPolicy` from its settings or flags.

The NVML side is :func:`cdictk.node.nvmlwatch.job`, streaming in the one NVML runner's child
(:class:`cdictk.node.nvmlchild.NvmlChild`); this keeps the state:

- a GPU NVML cannot find (lost, fallen off the bus) is unhealthy, with its MIG devices, until NVML
  answers for it again; so is one the agent's last discovery did not find (``absent``), which the
  device plugin keeps offering rather than dropping it from the kubelet's list;
- a fatal Xid (any but the application errors of :data:`IGNORED_XIDS` and the policy's
  own list) makes the GPU unhealthy, or only the MIG device whose GPU and compute instance it names
  (an event that names a GPU instance without a compute instance is the whole GPU's),
  until ``xid_recovery`` seconds pass without another and NVML answers for the GPU; with
  ``xid_recovery`` None, until the plugin restarts (NVIDIA's plugin never recovers a device);
- while the child is down or its event wait fails, every device is unhealthy (unmonitored): nothing
  vouches for them. Only a working event wait (the child's ``watching``) clears that, not a probe: a GPU NVML
  still finds while events cannot be had would otherwise flap at every probe, each flip a new list
  for the kubelet;
- an Xid on a GPU NVML cannot name counts for every GPU;
- an NVML without the event API (the child's ``probing``) has no Xids to tell: its probes alone say
  which GPUs are lost;
- with health checks off (``enabled`` false), every device is healthy, whatever the (topology-only)
  child or discovery says.

Each change is one log line: devices going unhealthy (and why), healthy again, or unhealthy for
another reason; and the end of each Xid's recovery period.

The topology (:meth:`HealthMonitor.links`) comes from the child too, a moment after it starts: until
it has said (or failed), asking for it waits, at most :data:`TOPOLOGY_DEADLINE` from the child's start,
so that the first preferred allocation after the plugin registers already has it.

:meth:`HealthMonitor.feed` takes the child's messages, so the rules are tested without a child.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdictk.node import nvmlwatch
from cdictk.node.nvmlchild import Job, NvmlChild
from cdictk.node.nvmllib import NvmlError

TOPOLOGY_DEADLINE = 10.0  # seconds from the child's start until asking for the topology stops waiting
# Application errors that leave the GPU usable, as NVIDIA's plugins ignore them: graphics engine
# exception, page fault, stopped processing, preemptive cleanup, video processor exception, context
# switch timeout.
IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
# What kind of trouble a device is in (Finding.cause).
XID = "xid"  # a fatal Xid within its recovery period
LOST = "lost"  # NVML cannot find its GPU, or the last discovery did not
UNMONITORED = "unmonitored"  # the NVML watcher is down or cannot wait for events: nothing vouches


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """How health is judged; each agent builds it from its own settings or flags."""

    enabled: bool = True
    ignored_xids: tuple[int, ...] = IGNORED_XIDS
    # A device made unhealthy by a fatal Xid is healthy again once NVML answers for it and this many
    # seconds passed without another; None: never (NVIDIA's plugin: until it restarts).
    xid_recovery: float | None = 300.0
    probe_interval: float = 5.0  # seconds between NVML checks of lost devices (and event waits)


@dataclass(frozen=True, slots=True)
class Finding:
    """Why one device is unhealthy: :data:`XID`, :data:`LOST` or :data:`UNMONITORED`, the words the
    log says, and the Xid for :data:`XID`."""

    cause: str
    why: str
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Watched:
    """A device as health sees it: its own UUID, its GPU's, and for a MIG device its instances."""

    uuid: str
    gpu_uuid: str
    gi: int | None = None
    ci: int | None = None


class HealthMonitor:
    def __init__(
        self,
        settings: HealthPolicy,
        on_change: Callable[[], None] = lambda: None,
        *,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.settings = settings
        self.on_change = on_change
        self.clock = clock
        self.log = log
        self._lock = threading.Lock()
        self._devices: tuple[Watched, ...] = ()
        self._lost: dict[str, str] = {}
        self._absent: dict[str, str] = {}
        self._xids: dict[tuple[str, int | None, int | None], tuple[float, int]] = {}
        self._down: str | None = None
        self._links: dict[frozenset[str], int] = {}
        self._links_known = threading.Event()  # the child said them, or cannot; set while none runs
        self._links_known.set()
        self._links_due = 0.0  # time.monotonic() by which the child must have said them
        self._last: dict[str, str] = {}
        self._child: NvmlChild | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # what the running child was started with: the library, the job, the GPUs it watches
        self._started: tuple[str, Job | None, tuple[str, ...]] | None = None
        self.probes = 0  # probes heard: the child is watching events once there is one

    # ---- the rules ----------------------------------------------------------------------------

    def watch(self, devices: Sequence[Watched], absent: Mapping[str, str] | None = None) -> None:
        """The devices to report on (after discovery); forgets what is known of GPUs no longer there,
        and runs the NVML child again (once started) when the set of GPUs changed: it watches and
        probes the GPUs it was started with. ``absent``: GPU UUID -> why, for GPUs among them that
        discovery did not find."""
        with self._lock:
            self._devices = tuple(devices)
            gpus = {device.gpu_uuid for device in devices}
            self._absent = dict(absent or {})
            self._lost = {uuid: why for uuid, why in self._lost.items() if uuid in gpus}
            self._xids = {key: seen for key, seen in self._xids.items() if key[0] in gpus}
        self._changed()
        if self._started is not None and gpus != set(self._started[2]):
            self.log(f"the GPUs changed; watching {len(gpus)} with NVML afresh")
            self.start(self._started[0], self._started[1])

    def feed(self, message: dict[str, Any]) -> None:
        """One message of the NVML child."""
        with self._lock:
            if "probe" in message:
                self.probes += 1
                self._lost = {uuid: why for uuid, why in message["probe"].items() if why}
                for uuid, why in message["probe"].items():
                    if not why:
                        self._absent.pop(uuid, None)
            elif "watching" in message:
                self._down = None
            elif "probing" in message:
                # no events to wait for: the probes vouch for the GPUs, said once per child
                self.log(f"{message['probing']}: health from probes alone, no Xids")
                self._down = None
            elif "xid" in message:
                self._xid(message)
            elif "error" in message:
                if message["error"] != self._down and not self.settings.enabled:
                    self.log(str(message["error"]))  # else the devices' change says it
                self._down = str(message["error"])
                self._links_known.set()  # the child failed: its topology may never come
            if "links" in message:
                self._links = {frozenset((a, b)): int(score) for a, b, score in message["links"]}
                self._links_known.set()
        self._changed()

    def _xid(self, message: dict[str, Any]) -> None:
        xid, uuid = int(message["xid"]), message.get("uuid")
        if xid in self.settings.ignored_xids:
            self.log(f"Xid {xid} on {uuid or 'a GPU'}: an application error, the GPU stays healthy")
            return
        gi, ci = message.get("gi"), message.get("ci")
        keys: list[tuple[str, int | None, int | None]]
        if uuid is None:
            # NVML could not name the GPU: each may be the one (NVIDIA's plugin marks them all too).
            keys = [(gpu, None, None) for gpu in sorted({device.gpu_uuid for device in self._devices})]
            self.log(
                f"Xid {xid} on a GPU NVML cannot name ({message.get('why')}): every GPU marked unhealthy"
            )
        else:
            # An event names a MIG device only with both instances; with either missing it is the
            # GPU's, and so every MIG device's on it (as NVIDIA's plugin matches them).
            keys = [(str(uuid), gi, ci) if gi is not None and ci is not None else (str(uuid), None, None)]
            self.log(f"Xid {xid} on {_instance(keys[0])}")
        for key in keys:
            self._xids[key] = (self.clock(), xid)

    def tick(self) -> None:
        """Re-evaluate, as time passed (an Xid's recovery time may have come): the plugin's every look."""
        self._changed()

    def unhealthy(self) -> dict[str, str]:
        """Device UUID -> why it is unhealthy, for every unhealthy device watched."""
        return {uuid: finding.why for uuid, finding in self.findings().items()}

    def findings(self) -> dict[str, Finding]:
        """Device UUID -> what kind of trouble it is in, for every unhealthy device watched."""
        with self._lock:
            return self._evaluate()

    def links(self) -> dict[frozenset[str], int]:
        """How well each pair of GPUs is connected (nvmlwatch.pair_score). While the child has not
        said yet, waits until it does or fails, or :data:`TOPOLOGY_DEADLINE` after its start passes:
        empty then (no topology: devices go by index)."""
        self._links_known.wait(max(0.0, self._links_due - time.monotonic()))
        with self._lock:
            return dict(self._links)

    def _evaluate(self) -> dict[str, Finding]:
        if not self.settings.enabled:
            return {}  # health checks off: every device healthy, whatever NVML or discovery said
        now = self.clock()
        recovery = self.settings.xid_recovery
        found = {}
        for device in self._devices:
            lost = self._lost.get(device.gpu_uuid) or self._absent.get(device.gpu_uuid)
            finding: Finding | None = None
            if self._down:
                finding = Finding(UNMONITORED, self._down)
            elif lost:
                finding = Finding(LOST, lost)
            else:
                for key in ((device.gpu_uuid, None, None), (device.gpu_uuid, device.gi, device.ci)):
                    seen = self._xids.get(key)
                    if seen is not None and (recovery is None or now - seen[0] < recovery):
                        finding = Finding(XID, f"Xid {seen[1]}", seen[1])
                        break
            if finding is not None:
                found[device.uuid] = finding
        return found

    def _recover(self) -> list[str]:
        """Forget the Xids whose recovery period ended: a line each."""
        recovery = self.settings.xid_recovery
        if recovery is None:
            return []
        now = self.clock()
        lines = []
        for key, (seen, xid) in list(self._xids.items()):
            if now - seen >= recovery:
                del self._xids[key]
                lines.append(
                    f"Xid {xid} on {_instance(key)}: {recovery:g} s without another, its recovery is over"
                )
        return lines if self.settings.enabled else []

    def _changed(self) -> None:
        with self._lock:
            lines = self._recover()
            now = {uuid: finding.why for uuid, finding in self._evaluate().items()}
            changed = now != self._last
            if changed:
                lines += _transitions(self._last, now, {device.uuid for device in self._devices})
                self._last = now
        for line in lines:
            self.log(line)
        if changed:
            self.on_change()

    # ---- the child ----------------------------------------------------------------------------

    def start(self, library: str, job: Job | None = None) -> None:
        """Run the NVML child for the watched GPUs (again, if it runs), reading it in a thread.
        ``job``: another than :func:`cdictk.node.nvmlwatch.job` (a stand-in)."""
        self.stop()
        self._stopped = threading.Event()
        gpus = sorted({device.gpu_uuid for device in self._devices})
        self._started = (library, job, tuple(gpus))
        if not self._links:  # a child run again for other GPUs: the topology known so far stands
            self._links_due = time.monotonic() + TOPOLOGY_DEADLINE
            self._links_known.clear()
        argument = {"uuids": gpus, "interval": self.settings.probe_interval, "events": self.settings.enabled}
        self._thread = threading.Thread(
            target=self._run, args=(library, job or nvmlwatch.job, argument, self._stopped), daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._links_known.set()
        child = self._child
        if child is not None:
            child.kill()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self, library: str, job: Job, argument: dict[str, Any], stopped: threading.Event) -> None:
        while not stopped.is_set():
            child = self._child = NvmlChild(job)
            if stopped.is_set():  # stop() came between the loop's test and the child's start
                child.kill()
            child.ask(library, argument)
            try:
                while (message := child.receive()) is not None:
                    self.feed(message)
                ended = f"the NVML watcher ended ({child.status})"
            except NvmlError as exc:  # bytes that are no message: the child was killed
                ended = f"the NVML watcher failed: {exc.problem.reason}"
            finally:
                child.close()
            self._links_known.set()  # said by now, or never by this child
            if stopped.is_set() or not self.settings.enabled:
                return
            self.feed({"error": f"{ended}; restarting it"})
            stopped.wait(self.settings.probe_interval)


def _instance(key: tuple[str, int | None, int | None]) -> str:
    """A GPU's UUID, or its MIG instances: ``GPU-... GI 2 CI 0``."""
    uuid, gi, ci = key
    return uuid if gi is None else f"{uuid} GI {gi} CI {ci}"


def _transitions(last: Mapping[str, str], now: Mapping[str, str], watched: set[str]) -> list[str]:
    """A line for each reason devices are unhealthy for now and were not before (healthy, or unhealthy
    for another reason), one for the devices healthy again (still watched: one no longer offered is
    not)."""
    by_reason: dict[str, list[str]] = {}
    for device, why in now.items():
        if last.get(device) != why:
            by_reason.setdefault(why, []).append(device)
    lines = [f"{_devices(devices, watched)} unhealthy: {why}" for why, devices in by_reason.items()]
    back = [device for device in last if device not in now and device in watched]
    if back:
        lines.append(f"{_devices(back, watched)} healthy again")
    return lines


def _devices(devices: Sequence[str], watched: set[str]) -> str:
    if len(watched) > 1 and set(devices) == watched:
        return f"all {len(watched)} devices"
    return ", ".join(sorted(devices))
