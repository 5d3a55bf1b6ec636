"""Unhealthy devices as device taints, as NVIDIA's ``gpu-kubelet-plugin`` publishes them.

What :class:`cdictk.node.gpuhealth.HealthMonitor` finds becomes one taint on the device, its key in
the driver's domain (``gpu.nvidia.com`` unless renamed):

- a fatal Xid: ``<driver>/xid``, the Xid as its value, effect ``NoSchedule``;
- a lost GPU (NVML cannot find it): ``<driver>/gpu-lost``, ``NoSchedule``;
- the NVML watcher down (nothing vouches for the devices): ``<driver>/unmonitored``, effect ``None``,
  which schedules as before and only says so (Kubernetes 1.35 and later know that effect).

``NoSchedule`` keeps new claims off the device; claims already allocated keep it (``NoExecute`` would
evict their pods, which NVIDIA's driver does not do either). The API server keeps taints only with
its ``DRADeviceTaints`` feature gate (beta, on, from Kubernetes 1.36; alpha before).

A taint's ``timeAdded`` is when it first appeared, kept while it stays (:class:`TaintBook`), so
publishing unchanged health writes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from cdictk.dra.nodedevices import MIG, DraDevice, Taint
from cdictk.node.gpuhealth import LOST, UNMONITORED, XID, Finding, Watched
from cdictk.node.gpus import Gpu

NO_SCHEDULE = "NoSchedule"
NO_EFFECT = "None"


def taint(finding: Finding, driver: str) -> Taint:
    """The taint for what health found, without its time."""
    if finding.cause == XID:
        return Taint(f"{driver}/xid", NO_SCHEDULE, str(finding.xid))
    if finding.cause == LOST:
        return Taint(f"{driver}/gpu-lost", NO_SCHEDULE)
    if finding.cause == UNMONITORED:
        return Taint(f"{driver}/unmonitored", NO_EFFECT)
    raise ValueError(f"no taint for a finding of cause {finding.cause!r}")


def watched(devices: Sequence[DraDevice], gpus: Sequence[Gpu]) -> list[Watched]:
    """The devices as health watches them: a GPU by its UUID, a MIG device by its own, its GPU's and
    its instances (an Xid that names them taints it alone)."""
    instances = {mig.uuid: (mig.gi, mig.ci) for gpu in gpus for mig in gpu.migs}
    found = []
    for device in devices:
        uuid = str(device.attributes.get("uuid", ""))
        if not uuid:
            continue
        if device.type == MIG:
            gi, ci = instances.get(uuid, (None, None))
            found.append(Watched(uuid, str(device.attributes.get("parentUUID", "")), gi, ci))
        else:
            found.append(Watched(uuid, uuid))
    return found


def now() -> str:
    """The time as a taint's ``timeAdded`` says it (RFC 3339, whole seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TaintBook:
    """The taints of the driver's devices, each with the time it first appeared."""

    def __init__(self, driver: str, clock: Callable[[], str] = now) -> None:
        self.driver = driver
        self.clock = clock
        self._since: dict[tuple[str, Taint], str] = {}  # (device name, taint without time) -> added

    def apply(self, devices: Sequence[DraDevice], findings: Mapping[str, Finding]) -> tuple[DraDevice, ...]:
        """``devices`` with the taints of ``findings`` (device UUID -> what health found); a taint
        that went away is forgotten, so its return is a new time."""
        since = {}
        tainted = []
        for device in devices:
            finding = findings.get(str(device.attributes.get("uuid", "")))
            if finding is None:
                tainted.append(device)
                continue
            bare = taint(finding, self.driver)
            added = self._since.get((device.name, bare)) or self.clock()
            since[(device.name, bare)] = added
            tainted.append(dataclasses.replace(device, taints=(dataclasses.replace(bare, time_added=added),)))
        self._since = since
        return tuple(tainted)
