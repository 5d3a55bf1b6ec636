"""The device plugin's life: discover, serve a resource each, register, then follow the node.

Every second it looks at four things: whether an Xid's recovery time came (the lists go out again),
whether ``kubelet.sock`` is a new file (the kubelet restarted: every server is started again and
registered), whether one of our sockets is gone (the
same, for that one), and every ``rescan_interval`` the node's fingerprint (driver, GPUs, MIG instances,
device nodes: what ``cdictk cdi generate --watch`` watches). When that changed, the node is discovered
again: a resource whose devices changed sends its new list, a new one (a MIG profile created under
``mixed``) is served and registered, one gone is stopped (the kubelet marks its devices unhealthy, then
drops it). A GPU that discovery no longer finds (lost) stays in its list, unhealthy, with its MIG
devices. A discovery that fails is tried again at each rescan, a registration at each look.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent import futures

from cdictk.api import NodeSpecs, SpecDirs
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.registration import RegistrationError, kubelet_identity, register
from cdictk.deviceplugin.resources import Resource, build, keep_missing, numa_reader
from cdictk.deviceplugin.server import SHORTER_SOCKET, ResourceServer
from cdictk.node.gpuhealth import HealthMonitor, Watched
from cdictk.node.libchoice import LibraryError
from cdictk.node.nvmllib import nvml_library
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.fingerprint import node_fingerprint
from cdictk.unixgrpc import check_socket_path

LOOK_INTERVAL = 1.0


class DevicePlugin:
    def __init__(self, settings: Settings, log: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.log = log
        self.node = NodeSpecs(
            settings.driver_root,
            dev_root=settings.dev_root,
            proc_root=settings.proc_root,
            sys_root=settings.sys_root,
            max_age=float("inf"),
        )
        self.health = HealthMonitor(settings.health, self._health_changed, log=log)
        # The spec dirs' first scan (every spec parsed) runs beside discovery, which mostly waits
        # for NVML's child: it is wanted only once serving starts.
        self._specs: futures.Future[SpecDirs] | None = None
        if settings.spec_dirs:
            scan = futures.ThreadPoolExecutor(1, thread_name_prefix="spec-cache")
            self._specs = scan.submit(SpecDirs, settings.spec_dirs)
            scan.shutdown(wait=False)
        self.servers: dict[str, ResourceServer] = {}
        self._registered: set[str] = set()
        self._kubelet: tuple[int, int, int] | None = None
        self._fingerprint: tuple[object, ...] = ()
        self._offered: list[Resource] = []
        self._failure: str | None = None  # why the last rediscovery failed; None once one works
        self._register_failures: dict[str, str] = {}  # resource -> why its last registration failed

    def discover(self) -> list[Resource]:
        """The node's resources now (discovery run again)."""
        # Taken before discovery (a change meanwhile is seen at the next look), kept only once
        # discovery succeeded: a failed one is tried again at the next rescan.
        fingerprint = node_fingerprint(self.node.roots)
        self.node.refresh()
        gpus = self.node.facts().gpus
        resources = build(gpus, self.settings, numa_reader(self.node.roots.sys), self.log)
        self._fingerprint = fingerprint
        resources, missing = keep_missing(self._offered, resources, {gpu.uuid for gpu in gpus})
        for uuid in sorted(missing):
            self.log(f"GPU {uuid} was not found (lost?): still offered, unhealthy until NVML answers for it")
        self.health.watch(
            [Watched(d.uuid, d.gpu_uuid, d.gi, d.ci) for resource in resources for d in resource.devices],
            dict.fromkeys(missing, "not found by the last discovery"),
        )
        self._offered = resources
        return resources

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set. A first discovery that fails, or a resource whose socket path
        is too long, ends it at once (CdictkError): nothing could be served."""
        resources = self.discover()
        for resource in resources:
            check_socket_path(os.path.join(self.settings.plugin_dir, resource.socket), SHORTER_SOCKET)
        library = self._nvml_library()
        if library is not None:
            self.health.start(library)
        elif self.settings.health.enabled:
            self.log("no libnvidia-ml.so.1 under the driver root: no health checks, no topology")
        try:
            self.specs()  # its first scan done, or failed: before the first Allocate can come
            self._reconcile(resources)
            self._register_all()
            scanned = time.monotonic()
            while not stop.wait(min(LOOK_INTERVAL, self.settings.rescan_interval)):
                rescan = time.monotonic() - scanned >= self.settings.rescan_interval
                if rescan:
                    scanned = time.monotonic()
                self.look(rescan=rescan)
        finally:
            for server in self.servers.values():
                server.stop()
            self.health.stop()
            if self._specs is not None and self._specs.exception() is None:
                self._specs.result().close()

    def look(self, *, rescan: bool = True) -> None:
        """One round (each second; ``rescan``: every ``rescan_interval``), in this order: health
        re-evaluated, registrations the kubelet lost forgotten, the node discovered again if it
        changed, then whatever is not registered registered."""
        self.health.tick()  # an Xid's recovery time may have come: the list goes out now, not at a probe
        self._forget_lost_registrations()
        if rescan:
            self._rediscover_if_changed()
        self._register_all()

    def _forget_lost_registrations(self) -> None:
        """A new kubelet.sock (the kubelet restarted) loses every registration; a socket of ours
        deleted, its own."""
        identity = kubelet_identity(self.settings.plugin_dir)
        if identity != self._kubelet:
            if identity is not None:
                self.log("kubelet.sock is new: the kubelet restarted; serving and registering again")
            self._kubelet = identity
            self._registered.clear()
        for name, server in self.servers.items():
            if name in self._registered and server.socket_gone():
                self.log(f"{server.path} was removed; serving and registering {name} again")
                self._registered.discard(name)

    def _rediscover_if_changed(self) -> None:
        """Discovery again when the node's fingerprint changed; one that fails keeps what is offered
        and is tried again at the next rescan, its reason said once until it changes."""
        if node_fingerprint(self.node.roots) == self._fingerprint:
            return
        if self._failure is None:
            self.log("the node changed (driver, GPUs or MIG); discovering it again")
        try:
            resources = self.discover()
        except CdictkError as exc:
            if str(exc) != self._failure:
                self.log(f"discovery failed, keeping the devices offered; trying again at each rescan: {exc}")
            self._failure = str(exc)
            return
        self._failure = None
        self._reconcile(resources)

    def _reconcile(self, resources: list[Resource]) -> None:
        """A server per resource: new ones made, changed ones updated, those with no devices left
        stopped. Registering is the caller's next step."""
        wanted = {resource.name: resource for resource in resources}
        for name in list(self.servers):
            if name not in wanted:
                self.log(f"{name}: no devices left; no longer served")
                self.servers.pop(name).stop()
                self._registered.discard(name)
        for name, resource in wanted.items():
            server = self.servers.get(name)
            if server is None:
                self.servers[name] = ResourceServer(
                    resource,
                    self.settings,
                    health=self.health.unhealthy,
                    links=self.health.links,
                    unresolved=self._unresolved if self._specs is not None else None,
                    log=self.log,
                )
            elif server.resource != resource:
                server.update(resource)

    def _register_all(self) -> None:
        if self._kubelet is None:
            self._kubelet = kubelet_identity(self.settings.plugin_dir)
        for name, server in sorted(self.servers.items()):
            if name in self._registered:
                continue
            try:
                server.stop()
                server.start()
                register(self.settings.plugin_dir, name, server.resource.socket)
            except (RegistrationError, CdictkError) as exc:
                # Tried again at every look (each second): said once until the reason changes.
                if self._register_failures.get(name) != str(exc):
                    self.log(f"{exc} (trying again every {LOOK_INTERVAL:g} s)")
                self._register_failures[name] = str(exc)
                continue
            self._register_failures.pop(name, None)
            self._registered.add(name)
            self.log(f"registered {name} ({len(server.resource.devices)} devices) on {server.path}")

    def _health_changed(self) -> None:
        for server in list(self.servers.values()):
            server.update()

    def specs(self) -> SpecDirs | None:
        """The node's CDI specs (None when no spec dir is to be checked), once scanned."""
        return self._specs.result() if self._specs is not None else None

    def _unresolved(self, names: list[str]) -> list[str]:
        specs = self.specs()
        defined = set(specs.devices()) if specs is not None else set()
        return [name for name in names if name not in defined]

    def _nvml_library(self) -> str | None:
        """The NVML its child loads; None where there is none. One that is not root's alone stops the
        plugin (LibraryError): health and topology from it would run its code as root."""
        try:
            return nvml_library(self.node.roots.driver)
        except LibraryError as exc:
            if exc.refused:
                raise
            return None
