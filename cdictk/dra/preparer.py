"""Claims prepared and unprepared: a CDI spec per claim, kept track of in the checkpoint.

What ``NodePrepareResources`` and ``NodeUnprepareResources`` do, without the gRPC around them. Per
claim, as NVIDIA's ``gpu-kubelet-plugin`` does:

- a claim ``completed`` already answers what it answered before, and its spec is written again if the
  file is gone (``/var/run/cdi`` is a tmpfs; a pod whose spec is missing fails to start with
  "unresolvable CDI devices");
- a device already prepared for another completed claim is refused ("device gpu-0 is already
  prepared for claim ns/name"): the scheduler can hand one device to two claims (a race, a pod
  deleted by force). Admin access, and one share ID on both results, may share a device;
- a claim left ``started`` (a prepare cut short) is rolled back first;
- the claim is checkpointed ``started``, its spec written (atomically: no runtime reads half a spec),
  then checkpointed ``completed``. A failure in between rolls back what it wrote.

One claim's failure is its own error line; the others are answered as if it had not been asked. An
unprepare removes the spec, then the entry; a claim it does not know succeeds (the kubelet repeats).
:meth:`Preparer.cleanup`, at start, rolls back ``started`` claims and removes specs no completed claim
holds. Calls are serialized: the gRPC server may call from several threads.

The spec's devices come from :class:`cdictk.api.NodeSpecs` (its kind must be the claims' kind,
:data:`cdictk.dra.cdinames.KIND`), found by the UUID the device is published with and named as it is
in the ResourceSlice, so the CDI ids are ``k8s.gpu.nvidia.com/claim=<claim UID>-<device>``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdictk.api import CdictkError, NodeSpecs, TransientSpecs
from cdictk.dra import cdinames
from cdictk.dra.checkpoint import COMPLETED, STARTED, Checkpoint, PreparedClaim, PreparedDevice
from cdictk.dra.claimresults import AllocatedDevice, ClaimError, allocated_devices
from cdictk.dra.nodedevices import node_devices

log = logging.getLogger(__name__)

ClaimToPrepare = tuple[str, str, str, Mapping[str, Any]]  # namespace, name, UID, the ResourceClaim
ClaimToUnprepare = tuple[str, str, str]  # namespace, name, UID


@dataclass(frozen=True, slots=True)
class Prepared:
    """A claim's answer: its devices, or ``error`` (one line) and no devices."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str | None = None


class Preparer:
    """Prepares this node's claims of ``driver`` in pool ``pool`` (the node's name) as spec files in
    ``specs``'s directory, checkpointed in ``checkpoint``."""

    def __init__(
        self, *, driver: str, pool: str, node: NodeSpecs, specs: TransientSpecs, checkpoint: Checkpoint
    ) -> None:
        if node.kind != specs.kind:
            raise CdictkError(
                "", "kind", f'the node\'s specs are of "{node.kind}", the store\'s of "{specs.kind}"'
            )
        self.driver, self.pool = driver, pool
        self._node, self._specs, self._checkpoint = node, specs, checkpoint
        self._lock = threading.Lock()
        self._claims = checkpoint.load()

    def prepared(self) -> dict[str, PreparedClaim]:
        """The checkpoint's claims by UID, as they stand."""
        with self._lock:
            return dict(self._claims)

    def cleanup(self) -> list[str]:
        """At start: roll back the claims a prepare left ``started`` and remove the specs no completed
        claim holds (those of a checkpoint from before a reboot too); the claim UIDs removed."""
        with self._lock:
            started = [uid for uid, claim in self._claims.items() if claim.state == STARTED]
            for uid in started:
                self._specs.remove(uid)
            claims = {uid: claim for uid, claim in self._claims.items() if claim.state == COMPLETED}
            self._checkpoint.save(claims)  # also replaces a checkpoint of another boot
            self._claims = claims
            return sorted(set(started) | set(self._specs.gc(claims)))

    def prepare(self, claims: Sequence[ClaimToPrepare]) -> dict[str, Prepared]:
        """Each claim's devices or error, by UID."""
        answers = {}
        with self._lock:
            names = self._device_ids()
            for namespace, name, uid, claim in claims:
                try:
                    answers[uid] = Prepared(self._prepare(namespace, name, uid, claim, names))
                except CdictkError as exc:
                    log.warning("prepare of claim %s/%s (%s) failed: %s", namespace, name, uid, exc)
                    answers[uid] = Prepared(error=str(exc))
        return answers

    def unprepare(self, claims: Sequence[ClaimToUnprepare]) -> dict[str, str | None]:
        """None for each claim unprepared (or never prepared here), else its error, by UID."""
        answers: dict[str, str | None] = {}
        with self._lock:
            for namespace, name, uid in claims:
                try:
                    self._unprepare(uid)
                    answers[uid] = None
                except CdictkError as exc:
                    log.warning("unprepare of claim %s/%s (%s) failed: %s", namespace, name, uid, exc)
                    answers[uid] = str(exc)
        return answers

    def _device_ids(self) -> dict[str, str]:
        """The node's devices: DRA name -> the UUID that finds them in the node's specs."""
        found = {}
        for device in node_devices(self._node.facts()).devices:
            uuid = device.attributes.get("uuid")
            if isinstance(uuid, str) and uuid:
                found[device.name] = uuid
        return found

    def _prepare(
        self, namespace: str, name: str, uid: str, claim: Mapping[str, Any], ids: Mapping[str, str]
    ) -> tuple[PreparedDevice, ...]:
        results = allocated_devices(
            claim, uid=uid, driver=self.driver, pool=self.pool, devices=ids, namespace=namespace, name=name
        )
        label = f"{namespace}/{name}"
        known = self._claims.get(uid)
        if known is not None and known.state == COMPLETED:
            if not _spec_exists(self._specs, uid) and known.devices:
                # The file went (a reboot's empty tmpfs, a hand): the pods' runtime needs it again.
                self._write_spec(label, uid, known.devices, ids)
            return known.devices
        if known is not None:  # started: a prepare cut short; undo what it may have written
            self._specs.remove(uid)
            self._forget(uid)
        self._refuse_devices_in_use(label, uid, results)
        devices = tuple(_prepared_device(uid, result) for result in results)
        if not devices:
            return ()  # none of ours: nothing to write or to undo
        self._record(uid, PreparedClaim(namespace, name, STARTED, devices))
        try:
            self._write_spec(label, uid, devices, ids)
            self._record(uid, PreparedClaim(namespace, name, COMPLETED, devices))
        except CdictkError:
            self._roll_back(uid)
            raise
        return devices

    def _refuse_devices_in_use(self, label: str, uid: str, results: Sequence[AllocatedDevice]) -> None:
        for result in results:
            if result.admin_access:
                continue
            for other_uid, other in self._claims.items():
                if other_uid == uid or other.state != COMPLETED:
                    continue
                for device in other.devices:
                    if (device.pool, device.device) != (result.pool, result.device) or device.admin_access:
                        continue
                    if result.share_id is not None and device.share_id == result.share_id:
                        continue
                    holder = f"{other.namespace}/{other.name}"
                    raise ClaimError(label, f"device {result.device} is already prepared for claim {holder}")

    def _write_spec(
        self, label: str, uid: str, devices: Sequence[PreparedDevice], ids: Mapping[str, str]
    ) -> None:
        wanted = list(dict.fromkeys(device.device for device in devices))
        missing = [device for device in wanted if device not in ids]
        if missing:
            raise CdictkError(
                "", f"claim {uid}", f"device {missing[0]} is not a device of this node any more"
            )
        spec = self._node.claim_spec(
            uid, [ids[device] for device in wanted], names={ids[device]: device for device in wanted}
        )
        self._specs.write(uid, spec)

    def _unprepare(self, uid: str) -> None:
        self._specs.remove(uid)  # first: an entry left by a failure here is removed again next time
        if uid in self._claims:
            self._forget(uid)

    def _roll_back(self, uid: str) -> None:
        """Undo a failed prepare; what cannot be undone now stays ``started`` for the next try or
        :meth:`cleanup`."""
        try:
            self._specs.remove(uid)
            self._forget(uid)
        except CdictkError as exc:
            log.warning("claim %s: roll back failed, left for the next prepare or start: %s", uid, exc)

    def _record(self, uid: str, claim: PreparedClaim) -> None:
        claims = {**self._claims, uid: claim}
        self._checkpoint.save(claims)
        self._claims = claims  # only once it is on disk

    def _forget(self, uid: str) -> None:
        claims = {key: value for key, value in self._claims.items() if key != uid}
        self._checkpoint.save(claims)
        self._claims = claims


def _prepared_device(uid: str, result: AllocatedDevice) -> PreparedDevice:
    return PreparedDevice(
        request_names=(result.request,),
        pool=result.pool,
        device=result.device,
        cdi_device_ids=(cdinames.cdi_device_id(uid, result.device),),
        admin_access=result.admin_access,
        share_id=result.share_id,
    )


def _spec_exists(specs: TransientSpecs, uid: str) -> bool:
    return os.path.lexists(specs.path(uid))
