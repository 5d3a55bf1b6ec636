"""The kubelet's side of Dynamic Resource Allocation: the plugin watcher on a registry directory, and the
DRA manager's prepare and unprepare of a pod's claims.

- :class:`DraKubelet` watches a registry directory of the test's own for ``<driver>-reg.sock``: on a
  socket it has not seen (a new file, or one made anew by a restarted plugin) it asks ``GetInfo``
  (1 s, as the kubelet), requires the type ``DRAPlugin``, takes the first of the plugin's versions it
  knows (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``), dials the endpoint and says
  ``NotifyRegistrationStatus(true)``; a refusal is said with ``false`` and its reason. A socket that
  goes unregisters the driver.
- :meth:`DraKubelet.prepare` reads a pod's claims from the API server stand-in, requires the pod in
  each one's ``reservedFor``, batches the claims not prepared yet per driver of their results and calls
  ``NodePrepareResources`` once per driver; the answer is the CDI IDs of each claim by request.
  :meth:`DraKubelet.unprepare` forgets the pod, and calls ``NodeUnprepareResources`` for each claim no
  other pod holds, from the kubelet's own record (the claim may be gone from the API server).
  Every failure is a :class:`DraError` of one line, as the kubelet reports it in the pod's events.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from cdictk.dra.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from cdictk.dra.kubeletapi.pluginregistration_pb2 import InfoRequest, RegistrationStatus
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import RegistrationStub
from tests.e2e.kubelet.apiserver import ApiServer

PLUGIN_TYPE = "DRAPlugin"
KNOWN_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # what a 1.34+ kubelet speaks
_PROTOCOL: dict[str, tuple[Any, Any]] = {
    "v1.DRAPlugin": (dra_v1_pb2, dra_v1_pb2_grpc.DRAPluginStub),
    "v1beta1.DRAPlugin": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc.DRAPluginStub),
}
CALL_TIMEOUT = 45.0  # the kubelet's timeout of a prepare or unprepare call


class DraError(Exception):
    """A pod's claims could not be prepared or unprepared: one line."""


@dataclass
class Driver:
    """A registered DRA driver: its endpoint, the service version chosen, the connection."""

    name: str
    endpoint: str
    version: str
    channel: grpc.Channel
    stub: Any
    messages: Any


@dataclass
class ClaimInfo:
    """What the kubelet keeps of a prepared claim: enough to unprepare it without the API server."""

    namespace: str
    name: str
    uid: str
    drivers: tuple[str, ...]
    cdi_ids: dict[str, list[str]]  # request ("" for all of the claim's) -> CDI IDs
    pods: set[str] = field(default_factory=set)


class DraKubelet:
    def __init__(self, registry_dir: str, server: ApiServer, *, poll: float = 0.05) -> None:
        self.registry_dir = registry_dir
        self.server = server
        self.poll = poll
        self.drivers: dict[str, Driver] = {}
        self.claims: dict[str, ClaimInfo] = {}  # by UID
        self.registrations: list[tuple[str, bool, str]] = []  # (socket, registered, error)
        self._seen: dict[str, tuple[int, int]] = {}  # socket -> (inode, ctime_ns) registered from
        self._owner: dict[str, str] = {}  # socket -> the driver it registered
        self._registered: dict[str, int] = {}  # driver -> how many times
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the plugin watcher

    def start(self) -> None:
        os.makedirs(self.registry_dir, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="plugin-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._changed:
            for driver in self.drivers.values():
                driver.channel.close()
            self.drivers.clear()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.poll)

    def scan(self) -> None:
        """One look at the registry directory: new sockets registered, gone ones unregistered."""
        present = {}
        for name in sorted(os.listdir(self.registry_dir)):
            path = os.path.join(self.registry_dir, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISSOCK(info.st_mode) and name.endswith("-reg.sock"):
                present[path] = (info.st_ino, info.st_ctime_ns)
        for path in [p for p in self._seen if p not in present]:
            del self._seen[path]
            self._unregister(path)
        for path, identity in present.items():
            if self._seen.get(path) != identity:
                self._seen[path] = identity
                self._register(path)

    def _register(self, socket: str) -> None:
        channel = grpc.insecure_channel(f"unix://{socket}")
        try:
            registration = RegistrationStub(channel)
            try:
                info = registration.GetInfo(InfoRequest(), timeout=1)
            except grpc.RpcError as error:
                self._record(socket, False, f"GetInfo failed: {error.details()}")
                return
            problem, version = _check(info.type, info.name, list(info.supported_versions))
            driver = None
            if problem is None:
                endpoint = info.endpoint or socket
                driver_channel = grpc.insecure_channel(f"unix://{endpoint}")
                try:
                    grpc.channel_ready_future(driver_channel).result(timeout=5)
                except grpc.FutureTimeoutError:
                    driver_channel.close()
                    problem = f"cannot dial the DRA service of {info.name} at {endpoint}"
                else:
                    messages, stub = _PROTOCOL[version]
                    driver = Driver(
                        info.name, endpoint, version, driver_channel, stub(driver_channel), messages
                    )
            status = RegistrationStatus(plugin_registered=problem is None, error=problem or "")
            # The plugin's answer changes nothing: the kubelet has decided.
            with contextlib.suppress(grpc.RpcError):
                registration.NotifyRegistrationStatus(status, timeout=5)
            if driver is not None:
                with self._changed:
                    old = self.drivers.get(driver.name)
                    self.drivers[driver.name] = driver
                    self._owner[socket] = driver.name
                    self._registered[driver.name] = self._registered.get(driver.name, 0) + 1
                    if old is not None:
                        old.channel.close()
            self._record(socket, problem is None, problem or "")
        finally:
            channel.close()

    def _unregister(self, socket: str) -> None:
        with self._changed:
            name = self._owner.pop(socket, None)
            driver = self.drivers.pop(name, None) if name is not None else None
            self._changed.notify_all()
        if driver is not None:
            driver.channel.close()

    def _record(self, socket: str, registered: bool, error: str) -> None:
        with self._changed:
            self.registrations.append((socket, registered, error))
            self._changed.notify_all()

    def wait_for(self, what: str, predicate: Callable[[DraKubelet], bool], timeout: float = 30.0) -> None:
        """Wait until ``predicate(self)``; AssertionError naming ``what`` otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}: {self.registrations}")
                self._changed.wait(min(left, 0.1))

    def registered(self, driver: str) -> int:
        """How many times ``driver`` has been registered so far."""
        with self._changed:
            return self._registered.get(driver, 0)

    # ---- the DRA manager

    def prepare(self, pod_uid: str, claims: Sequence[tuple[str, str]]) -> dict[str, dict[str, list[str]]]:
        """Prepare the claims ``(namespace, name)`` of the pod ``pod_uid``; by claim UID, each request's
        CDI IDs ("" for devices the plugin named no request for)."""
        wanted: dict[str, list[tuple[str, str, str]]] = {}
        found: dict[str, tuple[str, str, str]] = {}
        for namespace, name in claims:
            claim = self.server.claims.get((namespace, name))
            if claim is None:
                raise DraError(f'resourceclaims.resource.k8s.io "{name}" not found')
            uid = str(claim["metadata"]["uid"])
            status = claim.get("status") or {}
            if not any(c.get("uid") == pod_uid for c in status.get("reservedFor") or []):
                raise DraError(f"pod {pod_uid} is not allowed to use ResourceClaim {namespace}/{name}")
            allocation = status.get("allocation")
            if not allocation:
                raise DraError(f"ResourceClaim {namespace}/{name} is not allocated")
            results = (allocation.get("devices") or {}).get("results") or []
            drivers = tuple(dict.fromkeys(str(r["driver"]) for r in results))
            found[uid] = (namespace, name, uid)
            known = self.claims.get(uid)
            if known is not None:
                continue  # prepared for another pod already
            self.claims[uid] = ClaimInfo(namespace, name, uid, drivers, {})
            for each in drivers:
                wanted.setdefault(each, []).append((namespace, name, uid))
        try:
            for driver_name, batch in wanted.items():
                driver = self._driver(driver_name)
                answer = self._call(driver, "NodePrepareResources", batch)
                for namespace, name, uid in batch:
                    if uid not in answer.claims:
                        raise DraError(
                            f"NodePrepareResources of {driver_name} skipped claim {namespace}/{name}"
                        )
                    result = answer.claims[uid]
                    if result.error:
                        raise DraError(
                            f"prepare of ResourceClaim {namespace}/{name} by {driver_name} failed: {result.error}"
                        )
                    ids = self.claims[uid].cdi_ids
                    for device in result.devices:
                        for request in list(device.request_names) or [""]:
                            ids.setdefault(request, []).extend(device.cdi_device_ids)
                unknown = set(answer.claims) - {uid for _, _, uid in batch}
                if unknown:
                    raise DraError(
                        f"NodePrepareResources of {driver_name} answered unknown claims {sorted(unknown)}"
                    )
        except DraError:
            for batch in wanted.values():
                for _, _, uid in batch:
                    self.claims.pop(uid, None)  # not prepared: tried again with the pod's next sync
            raise
        for uid in found:
            self.claims[uid].pods.add(pod_uid)
        return {uid: dict(self.claims[uid].cdi_ids) for uid in found}

    def unprepare(self, pod_uid: str) -> list[str]:
        """The pod is gone: unprepare each of its claims no other pod holds; their UIDs."""
        done = []
        batches: dict[str, list[ClaimInfo]] = {}
        for info in list(self.claims.values()):
            if pod_uid not in info.pods:
                continue
            info.pods.discard(pod_uid)
            if not info.pods:
                for each in info.drivers:
                    batches.setdefault(each, []).append(info)
        for driver_name, infos in batches.items():
            driver = self._driver(driver_name)
            batch = [(i.namespace, i.name, i.uid) for i in infos]
            answer = self._call(driver, "NodeUnprepareResources", batch)
            for info in infos:
                result = answer.claims.get(info.uid)
                if result is None:
                    raise DraError(
                        f"NodeUnprepareResources of {driver_name} skipped claim {info.namespace}/{info.name}"
                    )
                if result.error:
                    raise DraError(
                        f"unprepare of ResourceClaim {info.namespace}/{info.name} by {driver_name} failed: {result.error}"
                    )
        for infos in batches.values():
            for info in infos:
                self.claims.pop(info.uid, None)
                done.append(info.uid)
        return done

    def _driver(self, name: str) -> Driver:
        with self._changed:
            driver = self.drivers.get(name)
        if driver is None:
            raise DraError(f"DRA driver {name} is not registered")
        return driver

    def _call(self, driver: Driver, method: str, batch: Sequence[tuple[str, str, str]]) -> Any:
        messages = driver.messages
        request_type = getattr(messages, f"{method}Request")
        request = request_type(
            claims=[messages.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in batch]
        )
        try:
            return getattr(driver.stub, method)(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            details = " ".join((error.details() or str(error.code())).split())
            raise DraError(f"{method} of {driver.name} failed: {details}") from None


def _check(plugin_type: str, name: str, versions: list[str]) -> tuple[str | None, str]:
    """Why the kubelet refuses a plugin (None if it does not), and the service version it picks."""
    if plugin_type != PLUGIN_TYPE:
        return f"no handler registered for plugin type: {plugin_type}", ""
    if not name:
        return "the plugin has no name", ""
    if not versions:
        return f"plugin {name} supports no version", ""
    chosen = next((v for v in versions if v in KNOWN_VERSIONS), None)
    if chosen is None:
        return f"none of the versions {versions} of plugin {name} is supported", ""
    return None, chosen


def container_cdi_ids(
    prepared: dict[str, dict[str, list[str]]], uid: str, request: str | None = None
) -> list[str]:
    """The CDI IDs a container naming claim ``uid`` (and ``request`` of it, if given) gets: the kubelet's
    ``CDI_devices``. Devices the plugin named no request for go to every container of the claim."""
    ids = prepared[uid]
    chosen = [*ids.get("", [])]
    for name, names in ids.items():
        if name and (request is None or name == request):
            chosen.extend(names)
    return list(dict.fromkeys(chosen))
