"""One resource's gRPC server: the ``v1beta1.DevicePlugin`` service on its socket in the kubelet's
device plugin directory.

The servicer is the generated ``DevicePluginServicer`` (proto/deviceplugin_pb2_grpc.py), served by
grpcio's asyncio server on an event loop in a thread of its own (:class:`cdictk.unixgrpc.UnixServer`).
``ListAndWatch`` sends the whole list at once and again on every change (health, devices), and ends when
the server stops; a stream is a coroutine waiting on that loop, so open streams tie up no thread: a peer
holding many (a kubelet that reconnected without closing, a monitoring tool) never keeps the other calls
or the kubelet's own stream waiting. The calls that answer from memory run on the loop too;
GetPreferredAllocation, which may wait for the GPUs' topology, in a small pool of threads beside it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import grpc

from cdictk.api import CdictkError
from cdictk.deviceplugin.allocation import allocate
from cdictk.deviceplugin.kubelet import HEALTHY, UNHEALTHY
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.proto.deviceplugin_pb2 import (
    AllocateRequest,
    AllocateResponse,
    ContainerPreferredAllocationResponse,
    Device,
    DevicePluginOptions,
    Empty,
    ListAndWatchResponse,
    NUMANode,
    PreferredAllocationRequest,
    PreferredAllocationResponse,
    PreStartContainerRequest,
    PreStartContainerResponse,
    TopologyInfo,
)
from cdictk.deviceplugin.proto.deviceplugin_pb2_grpc import (
    DevicePluginServicer,
    add_DevicePluginServicer_to_server,
)
from cdictk.deviceplugin.resources import Resource
from cdictk.deviceplugin.topology import Links, preferred
from cdictk.unixgrpc import Context, UnixServer

OPTIONS = DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)
PREFERRED_WORKERS = 4  # GetPreferredAllocation calls at once
# What makes a resource's socket path shorter, when it is too long for a Unix socket.
SHORTER_SOCKET = "a shorter resource name (sharing.timeSlicing.resources[].rename) or plugin directory"


class ResourceServer(DevicePluginServicer):
    """Serves one resource. ``update`` swaps its devices; ``health`` says which are unhealthy (UUID ->
    why), ``links`` how GPUs are connected, ``unresolved`` which CDI names no spec defines."""

    def __init__(
        self,
        resource: Resource,
        settings: Settings,
        *,
        health: Callable[[], dict[str, str]] = dict,
        links: Callable[[], Links] = dict,
        unresolved: Callable[[list[str]], list[str]] | None = None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.resource = resource
        self.settings = settings
        self.health = health
        self.links = links
        self.unresolved = unresolved
        self.log = log
        self.path = os.path.join(settings.plugin_dir, resource.socket)
        self._lock = threading.Lock()  # the resource and the generation, changed from other threads
        self._generation = 0  # one more at each change: a stream that sent an older one sends again
        self._stopped = False
        self._wake = asyncio.Event()  # set (and replaced) on the loop at each change
        self._server = UnixServer(
            self.path, self._add, name="device-plugin", workers=PREFERRED_WORKERS, remedy=SHORTER_SOCKET
        )

    # ---- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the socket (a stale one removed first): the kubelet dials it while we register."""
        self._stopped = False
        self._server.start()

    def _add(self, server: grpc.aio.Server) -> None:
        """On the loop, at each start: the streams' event belongs to it."""
        self._wake = asyncio.Event()
        add_DevicePluginServicer_to_server(self, server)

    def stop(self) -> None:
        """Stop serving: open streams end, the socket is removed."""
        with self._lock:
            self._stopped = True
        self._server.call_soon(self._wake_streams)  # they see _stopped and end
        self._server.stop()

    def socket_gone(self) -> bool:
        """Whether our socket file was removed (the kubelet deletes them all when it starts)."""
        return self._server.socket_gone()

    def update(self, resource: Resource | None = None) -> None:
        """New devices, or new health: every stream sends the list again."""
        with self._lock:
            if resource is not None:
                self.resource = resource
            self._generation += 1
        self._server.call_soon(self._wake_streams)  # not serving: no stream to wake

    def _wake_streams(self) -> None:
        """On the loop: every stream waiting for a change looks again."""
        self._wake.set()
        self._wake = asyncio.Event()

    # ---- the service ---------------------------------------------------------------------------

    def devices(self) -> list[Device]:
        unhealthy = self.health()
        return [
            Device(
                ID=device.id,
                health=UNHEALTHY if device.uuid in unhealthy or device.gpu_uuid in unhealthy else HEALTHY,
                topology=TopologyInfo(nodes=[NUMANode(ID=device.numa)]) if device.numa is not None else None,
            )
            for device in self.resource.devices
        ]

    # The servicer's methods, named as the service's: each takes the context of either server kind (the
    # generated base class's signature), and is served on the asyncio one.

    async def GetDevicePluginOptions(self, request: Empty, context: Context) -> DevicePluginOptions:
        return OPTIONS

    async def ListAndWatch(self, request: Empty, context: Context) -> AsyncIterator[ListAndWatchResponse]:
        """On the loop: the list now, then at every change until the server stops (or the peer goes)."""
        sent = -1
        while not self._stopped:
            wake = self._wake  # taken before the generation: a change after that sets this one
            if self._generation == sent:
                await wake.wait()
                continue
            sent = self._generation
            yield ListAndWatchResponse(devices=self.devices())

    def GetPreferredAllocation(
        self, request: PreferredAllocationRequest, context: Context
    ) -> PreferredAllocationResponse:
        """In the pool: it may wait for the topology, and score thousands of sets."""
        answers = []
        for container in request.container_requests:
            chosen = preferred(
                self.resource,
                container.available_deviceIDs,
                container.must_include_deviceIDs,
                container.allocation_size,
                self.links(),
            )
            answers.append(ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return PreferredAllocationResponse(container_responses=answers)

    async def Allocate(self, request: AllocateRequest, context: Context) -> AllocateResponse:
        """On the loop: it answers from memory (the spec dirs' view, which inotify keeps current), faster
        than a hand-over to a thread and back."""
        answers = []
        for container in request.container_requests:
            try:
                answers.append(allocate(self.resource, container.devices_ids, self.settings, self.unresolved))
            except CdictkError as exc:
                self.log(f"Allocate {', '.join(container.devices_ids)}: {exc}")
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return AllocateResponse(container_responses=answers)

    async def PreStartContainer(
        self, request: PreStartContainerRequest, context: Context
    ) -> PreStartContainerResponse:
        return PreStartContainerResponse()


async def _abort(context: Context, code: grpc.StatusCode, details: str) -> None:
    """End the call with ``code``. Ours is the asyncio server, whose context's abort is a coroutine."""
    await cast("grpc.aio.ServicerContext[Any, Any]", context).abort(code, details)
