"""The DRA kubelet plugin's life: discover, clean up, serve, register, publish, then follow the node.

In NVIDIA's ``gpu-kubelet-plugin``'s order: the node's devices discovered (the one discovery, through
:class:`cdictk.api.NodeSpecs`, kept warm for the claims' specs), the checkpoint opened and what a
cut-short prepare or a reboot left rolled back, the API version of ``resource.k8s.io`` asked of the API
server, the DRA service started on ``<plugin dir>/dra.sock`` and only then the registration socket
(the kubelet dials the service as soon as it has registered the plugin), then the ResourceSlices
published.

Then, each second: a socket of ours that was removed is served again (a kubelet that registered a
plugin whose registration socket vanished has unregistered it); every :data:`RESCAN` seconds the node's
fingerprint (driver, GPUs, MIG instances, device nodes: what the device plugin and ``cdictk cdi generate
--watch`` watch), and when it changed the node is discovered again and published; every ``resync``
seconds the slices are listed and written again where the kubelet wiped them (it does at its start,
and when the plugin stays away 30 s) or they no longer say what the devices say. A publish that
fails is tried again within :data:`RETRY` seconds, a rediscovery that fails at the next rescan (the
devices published are kept); each reason is said once until it changes. Each registration the kubelet
notifies is logged (``registered with the kubelet``), and each publish that wrote (``published N
device(s) in M ResourceSlice(s)``).

Health (unless off): the device plugin's monitor (:class:`cdictk.node.gpuhealth.HealthMonitor`, its
NVML watcher in a child of its own) watches the published devices; each change of health is one log
line and a publish at the next look, the unhealthy devices tainted (:mod:`cdictk.dra.devicetaints`)
under a new generation; an Xid's recovery ends its taint the same way. A server that drops the taints
(its DRADeviceTaints feature gate off) is said once; the devices are then published without them.

On stop (SIGTERM): the registration socket removed first (the kubelet unregisters the plugin), then
the service; prepared claims stay prepared (their pods run on) and the slices stay published (the
kubelet wipes them when the plugin stays away).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from cdictk.api import NodeSpecs
from cdictk.dra import cdinames, service
from cdictk.dra.checkpoint import Checkpoint
from cdictk.dra.devicetaints import TaintBook, watched
from cdictk.dra.kubeclient import KubeClient
from cdictk.dra.nodedevices import DraDevice, node_devices
from cdictk.dra.preparer import Preparer
from cdictk.dra.publisher import Publisher
from cdictk.dra.registrar import REGISTRY_DIR, SHORTER_SOCKET, Registrar, Status, check_driver_name
from cdictk.dra.slices import DRIVER
from cdictk.node.gpuhealth import HealthMonitor, HealthPolicy
from cdictk.node.libchoice import LibraryError
from cdictk.node.nvmllib import nvml_library
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.fingerprint import node_fingerprint
from cdictk.unixgrpc import UnixServer, check_socket_path

PLUGINS_DIR = "/var/lib/kubelet/plugins"
SOCKET = "dra.sock"
LOOK_INTERVAL = 1.0  # seconds between looks at the sockets and the kubelet's answer
RESCAN = 2.0  # seconds between looks at the node's fingerprint (the device plugin's default)
RESYNC = 30.0
RETRY = 5.0  # seconds after a publish that failed
MAX_NODE_NAME = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class _Socket(Protocol):
    """A server of ours on a socket: the DRA service's, the registration's."""

    @property
    def path(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class PluginSettings:
    node_name: str
    driver: str = DRIVER
    kubeconfig: str | None = None  # None: $KUBECONFIG, else the pod's service account
    registry_dir: str = REGISTRY_DIR
    plugin_dir: str | None = None  # None: <PLUGINS_DIR>/<driver>
    cdi_dir: str = cdinames.SPEC_DIR
    driver_root: str = "/"
    dev_root: str | None = None
    proc_root: str = "/proc"
    sys_root: str = "/sys"
    host_root: str = "/"  # where this process sees the node's /: the specs' paths are the node's
    hook_path: str | None = None  # the program the specs' hooks run; None: NodeSpecs' default
    resync: float = RESYNC
    health: HealthPolicy = field(default_factory=HealthPolicy)

    @property
    def directory(self) -> str:
        return self.plugin_dir or os.path.join(PLUGINS_DIR, self.driver)

    @property
    def socket(self) -> str:
        return os.path.join(self.directory, SOCKET)


class DraPlugin:
    """One run of the plugin, logging one line per event to ``log``."""

    def __init__(self, settings: PluginSettings, log: Callable[[str], None] = print) -> None:
        check_driver_name(settings.driver)
        if len(settings.node_name) > MAX_NODE_NAME or not _DNS_SUBDOMAIN.fullmatch(settings.node_name):
            raise CdictkError(
                "", "node name", f"{settings.node_name[: MAX_NODE_NAME + 1]!r} is not a Kubernetes node name"
            )
        check_socket_path(os.path.abspath(settings.socket), SHORTER_SOCKET)
        if settings.resync <= 0:
            raise CdictkError("", "resync", "must be above 0 seconds")
        self.settings = settings
        self.log = log
        self.node = NodeSpecs(
            settings.driver_root,
            dev_root=settings.dev_root,
            proc_root=settings.proc_root,
            sys_root=settings.sys_root,
            vendor=cdinames.VENDOR,
            device_class=cdinames.DEVICE_CLASS,
            max_age=float("inf"),  # discovered again when the fingerprint says the node changed
            hook_path=settings.hook_path,
            host_root=settings.host_root,
        )
        self.devices: tuple[DraDevice, ...] = ()
        self._fingerprint: tuple[object, ...] = ()
        self._said: dict[str, str] = {}  # what -> the failure last said, said again only when it changes
        self._status: Status | None = None  # the kubelet's last answer seen (a new one per answer)
        self._health_changed = threading.Event()  # set from the monitor's thread: publish at the next look
        self.health = HealthMonitor(settings.health, self._health_changed.set, log=log)
        self.taints = TaintBook(settings.driver)

    def discover(self) -> tuple[DraDevice, ...]:
        """The node's devices now (discovery run again); its warnings logged."""
        fingerprint = node_fingerprint(self.node.roots)  # before: a change meanwhile is seen next time
        self.node.refresh()
        facts = self.node.facts()
        found = node_devices(facts)
        for warning in found.warnings:
            self.log(warning)
        self._fingerprint = fingerprint
        self.devices = found.devices
        self.health.watch(watched(found.devices, facts.gpus))
        return found.devices

    def published_devices(self) -> tuple[DraDevice, ...]:
        """The devices as they are published now: tainted where health found trouble."""
        return self.taints.apply(self.devices, self.health.findings())

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set. What makes serving impossible ends it at once (CdictkError): a
        first discovery that fails, a checkpoint that cannot be read, an API server that serves no
        version of resource.k8s.io we speak, a socket that cannot be listened on."""
        settings = self.settings
        self.discover()
        os.makedirs(settings.directory, mode=0o750, exist_ok=True)
        checkpoint = Checkpoint(settings.directory, proc_root=settings.proc_root)
        preparer = Preparer(
            driver=settings.driver,
            pool=settings.node_name,
            node=self.node,
            specs=cdinames.claim_specs(settings.cdi_dir),
            checkpoint=checkpoint,
        )
        for uid in preparer.cleanup():
            self.log(f"claim {uid}: not prepared (left by a prepare cut short, or by another boot); removed")
        client = self._kube_client()
        self.log(f"the API server serves {client.api_version}")
        dra = service.DraService(preparer, client)
        server = UnixServer(
            os.path.abspath(settings.socket),
            lambda server: service.add_to_server(dra, server),
            name="dra-service",
            workers=service.WORKERS,
            remedy=SHORTER_SOCKET,
        )
        registrar = Registrar(settings.driver, settings.socket, settings.registry_dir, log=self.log)
        publisher = Publisher(client, settings.driver, settings.node_name, self.published_devices)
        try:
            self._start_health()
            server.start()
            self.log(f"serving the DRA service on {server.path}")
            registrar.start()
            self.log(f"waiting for the kubelet on {registrar.path}")
            scanned = time.monotonic()
            publish_at = scanned + self._publish(publisher)
            while not stop.wait(LOOK_INTERVAL):
                self._look_at_sockets(server, registrar)
                self.health.tick()  # an Xid's recovery time may have come
                now = time.monotonic()
                if self._health_changed.is_set():
                    self._health_changed.clear()  # before the publish: a change meanwhile publishes again
                    publish_at = now
                if now - scanned >= RESCAN:
                    scanned = now
                    wait = self._rediscover_if_changed(publisher)
                    if wait is not None:
                        publish_at = now + wait
                        continue
                if now >= publish_at:
                    publish_at = now + self._publish(publisher)
        finally:
            registrar.stop()  # first: the kubelet unregisters the plugin, then its service goes
            server.stop()
            client.close()
            self.health.stop()

    def _start_health(self) -> None:
        """The health monitor's NVML watcher started, where health is on and there is an NVML. One
        that is not root's alone stops the plugin (LibraryError): its code would run as root."""
        if not self.settings.health.enabled:
            return
        try:
            library = nvml_library(self.node.roots.driver)
        except LibraryError as error:
            if error.refused:
                raise
            self.log("no libnvidia-ml.so.1 under the driver root: no health checks")
            return
        self.health.start(library)

    def _kube_client(self) -> KubeClient:
        """A client from the kubeconfig (or the pod's service account), speaking the version the API
        server serves (v1, else v1beta1 on Kubernetes 1.32 and 1.33)."""
        client = KubeClient.from_kubeconfig(self.settings.kubeconfig)
        try:
            version = client.served_version()
        except CdictkError:
            client.close()
            raise
        if version != client.api_version:
            client = KubeClient(client.api_client, version)
        return client

    def _look_at_sockets(self, server: UnixServer, registrar: Registrar) -> None:
        """Each registration the kubelet notifies logged once; a socket of ours that was removed
        served again."""
        status = registrar.status
        if status is not self._status and status is not None and status.registered:
            self.log("registered with the kubelet")  # again after a kubelet restart: it registers anew
        self._status = status
        sockets: tuple[tuple[str, _Socket], ...] = (("DRA service", server), ("registration", registrar))
        for what, socket in sockets:
            if os.path.lexists(socket.path):
                continue
            self.log(f"{socket.path} was removed; serving the {what} again")
            try:
                socket.stop()
                socket.start()
            except CdictkError as error:
                self._say(what, f"the {what} socket cannot be served again (trying each second): {error}")
            else:
                self._said.pop(what, None)

    def _rediscover_if_changed(self, publisher: Publisher) -> float | None:
        """Discovery and a publish again when the node's fingerprint changed: then the seconds until
        the next publish, else None."""
        if node_fingerprint(self.node.roots) == self._fingerprint:
            return None
        if "discovery" not in self._said:
            self.log("the node changed (driver, GPUs or MIG); discovering it again")
        try:
            self.discover()
        except CdictkError as error:
            self._say("discovery", f"discovery failed, keeping the devices published: {error}")
            return None
        self._said.pop("discovery", None)
        return self._publish(publisher)

    def _publish(self, publisher: Publisher) -> float:
        """Publish what the devices say where the API server's slices do not; the seconds until the
        next try: ``resync``, or at most :data:`RETRY` after a failure (the API server back, the Node
        made)."""
        try:
            steps = publisher.resync()
        except CdictkError as error:
            retry = min(RETRY, self.settings.resync)
            self._say("publish", f"publishing ResourceSlices failed (trying again in {retry:g} s): {error}")
            return retry
        self._said.pop("publish", None)
        if publisher.taints_dropped:  # said once: it stays so
            self._say(
                "taints",
                "the API server dropped the devices' taints (its DRADeviceTaints feature gate is off): "
                "unhealthy devices are published without them",
            )
        if not steps.unchanged:
            slices = len(steps.replace) + len(steps.create)
            self.log(f"published {len(self.devices)} device(s) in {slices} ResourceSlice(s)")
        return self.settings.resync

    def _say(self, what: str, line: str) -> None:
        if self._said.get(what) != line:
            self.log(line)
        self._said[what] = line
