"""The GPU agents' NVML work: GPU topology, then Xid events and lost GPUs, as a streaming job.

:mod:`cdictk.node.gpuhealth` runs :func:`job` in a :class:`cdictk.node.nvmlchild.NvmlChild` with
the argument ``{"uuids": [...], "interval": seconds, "events": bool}`` (the GPUs' UUIDs; ``events``
false: the topology alone). It sends these messages:

- ``{"links": [[uuid_a, uuid_b, score], ...]}`` once: how well each pair of GPUs is connected
  (:func:`pair_score`);
- ``{"xid": N, "uuid": GPU, "gi": G, "ci": C}`` for each Xid event (gi and ci null for the whole GPU;
  uuid null, with ``why``, when NVML cannot name the GPU: every GPU is then in doubt);
- ``{"probe": {uuid: "" or why it failed}}`` every interval: whether NVML still answers for each GPU;
- ``{"watching": true}`` after the first event wait that works, and the first after failures;
- ``{"error": "..."}`` when waiting for events fails, once until it works again or fails otherwise
  (every device is in doubt until the next ``watching``), and before it ends on another NVML failure
  (the runner's own errors, a library it would not load, look the same);
- ``{"probing": "why"}`` once, when this NVML has no event API (creating an event set or waiting on one
  is not supported, or the function is missing): then only the probes follow.

Why a child of its own: the plugins' discovery asks NVML afresh in other children (a MIG change must
be seen); a process that holds NVML initialised would hand them its stale state. And a driver stuck in
the kernel hangs the child, not the plugin, which sees the probes stop.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any

from cdictk.node.nvmlchild import Send

NO_INSTANCE = 0xFFFFFFFF
# nvmlGpuTopologyLevel_t -> score, as NVIDIA's allocator weighs them: a board, one PCIe switch,
# several, a host bridge, one CPU, across CPUs.
PCIE_SCORES = {0: 60, 10: 50, 20: 40, 30: 30, 40: 20, 50: 10}
NVLINK_SCORE = 100  # per NVLink between the two GPUs


def job(nvml: Any, argument: dict[str, Any], send: Send) -> None:
    """The watcher, in the runner's child, pynvml pointed at the plugin's NVML; ends on an NVML
    failure other than the event wait's (the plugin runs it again)."""
    uuids, interval = [str(uuid) for uuid in argument["uuids"]], float(argument["interval"])
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        send({"error": f"nvmlInit failed: {exc}"})
        return
    send({"links": links(nvml, uuids)})
    if argument["events"]:
        try:
            watch(nvml, uuids, interval, send)
        except nvml.NVMLError as exc:
            send({"error": f"NVML events: {exc}"})


def pair_score(nvml: Any, a: Any, b: Any, bus_b: str) -> int:
    """PCIe closeness plus 100 per NVLink from ``a`` to ``b`` (whose bus id is ``bus_b``)."""
    score = 0
    with contextlib.suppress(nvml.NVMLError):
        score += PCIE_SCORES.get(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b), 0)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(a, link):
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(a, link).busId
        except nvml.NVMLError:
            continue
        remote = remote.decode() if isinstance(remote, bytes) else remote
        if remote.lower() == bus_b.lower():
            score += NVLINK_SCORE
    return score


def links(nvml: Any, uuids: list[str]) -> list[list[object]]:
    handles, buses = {}, {}
    for uuid in uuids:
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            bus = nvml.nvmlDeviceGetPciInfo(handle).busId
        except nvml.NVMLError:
            continue
        handles[uuid], buses[uuid] = handle, bus.decode() if isinstance(bus, bytes) else bus
    return [
        [a, b, pair_score(nvml, handles[a], handles[b], buses[b])]
        for a, b in itertools.combinations(handles, 2)
    ]


def probe(nvml: Any, uuids: list[str]) -> dict[str, str]:
    found = {}
    for uuid in uuids:
        try:
            nvml.nvmlDeviceGetHandleByUUID(uuid)
            found[uuid] = ""
        except nvml.NVMLError as exc:
            found[uuid] = str(exc)
    return found


def unsupported(nvml: Any, exc: Exception) -> bool:
    """Whether an NVMLError says this NVML has no such call (an old or a stripped library)."""
    return getattr(exc, "value", None) in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def watch(nvml: Any, uuids: list[str], interval: float, say: Send) -> None:
    try:
        events = nvml.nvmlEventSetCreate()
    except nvml.NVMLError as exc:
        if not unsupported(nvml, exc):
            raise
        return probe_only(nvml, uuids, interval, say, f"NVML has no events ({exc})")
    for uuid in uuids:
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
            nvml.nvmlDeviceRegisterEvents(handle, supported & nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError:
            continue  # a GPU lost now: the probe says so
    next_probe = 0.0
    told: str | None = None  # what the plugin was last told of the event wait: "" it works, else why not
    while True:
        now = time.monotonic()
        if now >= next_probe:
            say({"probe": probe(nvml, uuids)})
            next_probe = now + interval
        try:
            data = nvml.nvmlEventSetWait_v2(events, max(1, int((next_probe - now) * 1000)))
        except nvml.NVMLError as exc:
            if told is None and unsupported(nvml, exc):
                return probe_only(nvml, uuids, interval, say, f"NVML cannot wait for events ({exc})")
            if getattr(exc, "value", None) != nvml.NVML_ERROR_TIMEOUT:
                # Said once, not at every try: the devices stay in doubt until a wait succeeds.
                why = f"waiting for NVML events failed: {exc}"
                if told != why:
                    say({"error": why})
                    told = why
                time.sleep(interval)
                continue
            data = None
        if told != "":
            say({"watching": True})
            told = ""
        if data is None or data.eventType != nvml.nvmlEventTypeXidCriticalError:
            continue
        gi = None if data.gpuInstanceId == NO_INSTANCE else data.gpuInstanceId
        ci = None if data.computeInstanceId == NO_INSTANCE else data.computeInstanceId
        try:
            uuid = nvml.nvmlDeviceGetUUID(data.device)
        except nvml.NVMLError as exc:
            say({"xid": data.eventData, "uuid": None, "gi": None, "ci": None, "why": str(exc)})
            continue
        say(
            {
                "xid": data.eventData,
                "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                "gi": gi,
                "ci": ci,
            }
        )


def probe_only(nvml: Any, uuids: list[str], interval: float, say: Send, why: str) -> None:
    """Without events: say why once, then probe every ``interval``."""
    say({"probing": why})
    while True:
        say({"probe": probe(nvml, uuids)})
        time.sleep(interval)
