"""The node's ResourceSlices kept as the devices say: one pool, named by the node, reconciled with what
the API server holds.

:func:`plan` is the reconcile, without a server: given the slices listed for this driver and node and
the devices, which slices to delete, which to replace and which to create, and under which
generation. Nothing changes while the listed slices say what the devices say (an unchanged
re-publish writes nothing and keeps the generation). Otherwise every slice is written under the
highest generation seen plus one (consumers use only the highest generation of a pool, and wait for
``resourceSliceCount`` slices of it): listed slices whose name gives an index the pool still has are
replaced in place, the others (another pool size, a name taken twice) deleted, and the missing
indexes created. Deletions go first, then replacements, then creations, the order of Kubernetes' own
ResourceSlice controller.

:class:`Publisher` carries it out through a :class:`~cdictk.dra.kubeclient.KubeClient`, with the
Node as every slice's owner (its UID read once). Its :meth:`Publisher.resync` is for the plugin's
loop: the kubelet deletes its node's slices when it starts, and again when the plugin stays away,
so the plugin lists them now and then and publishes again what is gone or changed.

A server without the ``DRADeviceTaints`` feature gate (off before Kubernetes 1.36) drops the devices'
taints from what it stores. The publisher sees it in the server's answer
(:attr:`Publisher.taints_dropped`) and from then on publishes without them: the slices would never
say what it wants, and each resync would write them again under a new generation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdictk.dra.kubeclient import KubeClient, KubeError
from cdictk.dra.nodedevices import DraDevice
from cdictk.dra.slices import resource_slices, slice_index, slices_differ

NOT_FOUND = 404


@dataclass(frozen=True)
class Plan:
    """What to write: slice names to delete, (name, object) to replace, objects to create."""

    generation: int
    delete: tuple[str, ...] = ()
    replace: tuple[tuple[str, dict[str, Any]], ...] = ()
    create: tuple[dict[str, Any], ...] = ()

    @property
    def unchanged(self) -> bool:
        return not (self.delete or self.replace or self.create)


def plan(
    published: Sequence[Mapping[str, Any]],
    devices: Sequence[DraDevice],
    *,
    driver: str,
    node: str,
    api_version: str,
    node_uid: str | None = None,
    seen_generation: int = 0,
) -> Plan:
    """How to turn ``published`` (the slices listed for ``driver`` on ``node``) into the pool of
    ``devices``; ``seen_generation`` is the highest this publisher wrote before (a wipe leaves no
    slice to read it from, and generations must not go back)."""
    highest = max([seen_generation, *(_generation(item) for item in published)])

    def wanted(generation: int) -> list[dict[str, Any]]:
        return resource_slices(
            devices, node, driver=driver, api_version=api_version, generation=generation, node_uid=node_uid
        )

    if not slices_differ(published, wanted(max(highest, 1))):
        return Plan(highest)
    generation = highest + 1
    slices = wanted(generation)
    kept: dict[int, Mapping[str, Any]] = {}
    delete = []
    for item in published:
        name = str((item.get("metadata") or {}).get("name") or "")
        index = slice_index(name, len(slices))
        if index is None or index >= len(slices) or index in kept:
            delete.append(name)
        else:
            kept[index] = item
    replace = []
    create = []
    for index, body in enumerate(slices):
        have = kept.get(index)
        if have is None:
            create.append(body)
            continue
        metadata = {key: value for key, value in body["metadata"].items() if key != "generateName"}
        metadata["name"] = have["metadata"]["name"]
        metadata["resourceVersion"] = have["metadata"].get("resourceVersion")
        replace.append((metadata["name"], {**body, "metadata": metadata}))
    return Plan(generation, tuple(delete), tuple(replace), tuple(create))


class Publisher:
    """The pool of ``node`` for ``driver``; ``devices_source`` gives the node's devices now, for
    :meth:`resync`."""

    def __init__(
        self,
        client: KubeClient,
        driver: str,
        node: str,
        devices_source: Callable[[], Sequence[DraDevice]],
    ) -> None:
        self.client = client
        self.driver = driver
        self.node = node
        self.devices_source = devices_source
        self.generation = 0  # the highest written or seen
        self.taints_dropped = False  # the server dropped taints we sent: they are no longer sent
        self._node_uid: str | None = None

    def publish(self, devices: Sequence[DraDevice]) -> Plan:
        """Make the node's slices say ``devices``; what was done (nothing where they already did).
        KubeError where a call fails: the next publish or resync starts again from a fresh list."""
        if self._node_uid is None:
            self._node_uid = self.client.node_uid(self.node)
        if self.taints_dropped:
            devices = [dataclasses.replace(device, taints=()) for device in devices]
        published = self.client.list_slices(self.driver, self.node)
        steps = plan(
            published,
            devices,
            driver=self.driver,
            node=self.node,
            api_version=self.client.api_version,
            node_uid=self._node_uid,
            seen_generation=self.generation,
        )
        for name in steps.delete:
            try:
                self.client.delete_slice(name)
            except KubeError as error:
                if error.status != NOT_FOUND:  # gone already (the kubelet wiped it): as wanted
                    raise
        for name, body in steps.replace:
            self._dropped(body, self.client.replace_slice(name, body))
        for body in steps.create:
            self._dropped(body, self.client.create_slice(body))
        self.generation = max(self.generation, steps.generation)
        return steps

    def resync(self) -> Plan:
        """Publish the devices ``devices_source`` gives now: writes only where the listed slices were
        wiped, changed by someone else, or no longer say what the devices say."""
        return self.publish(self.devices_source())

    def _dropped(self, sent: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
        """Note a server that stored a slice we sent with taints without them."""
        if _tainted(sent) and not _tainted(stored):
            self.taints_dropped = True


def _tainted(item: Mapping[str, Any]) -> bool:
    devices = (item.get("spec") or {}).get("devices") or []
    return any(
        isinstance(device, Mapping) and ((device.get("basic") or device).get("taints") or [])
        for device in devices
    )


def _generation(item: Mapping[str, Any]) -> int:
    pool = (item.get("spec") or {}).get("pool") or {}
    value = pool.get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
