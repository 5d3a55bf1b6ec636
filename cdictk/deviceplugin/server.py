"""One resource's gRPC server: the ``v1beta1.DevicePlugin`` service on its socket in the kubelet's
device plugin directory.

The servicer is the generated ``DevicePluginServicer`` (proto/deviceplugin_pb2_grpc.py), served by
grpcio's asyncio server, which runs an event loop in a thread of its own. ``ListAndWatch`` sends the
whole list at once and again on every change (health, devices), and ends when the server stops; a
stream is a coroutine waiting on that loop, so open streams tie up no thread: a peer holding many (a
kubelet that reconnected without closing, a monitoring tool) never keeps the other calls or the
kubelet's own stream waiting. The calls that answer from memory run on the loop too;
GetPreferredAllocation, which may wait for the GPUs' topology, in a small pool of threads beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent import futures
from dataclasses import dataclass
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

# What the generated servicer's methods are handed: a context of the threaded or of the asyncio server.
Context = grpc.ServicerContext | grpc.aio.ServicerContext[Any, Any]
OPTIONS = DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)
SOCKET_PATH_MAX = 107  # sockaddr_un's sun_path, less its terminating NUL
PREFERRED_WORKERS = 4  # GetPreferredAllocation calls at once
STOP_GRACE = 1.0  # seconds that calls under way get when the server stops


def check_socket_path(path: str) -> str:
    """``path``, or a CdictkError when it is too long for a Unix socket (the bind would fail)."""
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        raise CdictkError(
            path,
            "",
            f"longer than a Unix socket path may be ({SOCKET_PATH_MAX} bytes): a shorter resource name "
            "(sharing.timeSlicing.resources[].rename) or plugin directory",
        )
    return path


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
        self._serving: _Serving | None = None
        self._wake = asyncio.Event()  # set (and replaced) on the loop at each change

    # ---- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the socket (a stale one removed first): the kubelet dials it while we register."""
        check_socket_path(self.path)
        if os.path.lexists(self.path):
            os.unlink(self.path)
        self._stopped = False
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="device-plugin", daemon=True)
        thread.start()
        pool = futures.ThreadPoolExecutor(PREFERRED_WORKERS, thread_name_prefix="device-plugin")
        serving = _Serving(loop, thread, pool)
        try:
            serving.server = asyncio.run_coroutine_threadsafe(self._serve(pool), loop).result()
        except BaseException:
            serving.close()
            raise
        with self._lock:
            self._serving = serving

    async def _serve(self, pool: futures.ThreadPoolExecutor) -> grpc.aio.Server:
        """The server, made and started on the loop (grpcio's asyncio objects belong to the loop that
        made them)."""
        self._wake = asyncio.Event()
        server = grpc.aio.server(migration_thread_pool=pool)
        add_DevicePluginServicer_to_server(self, server)
        if server.add_insecure_port(f"unix://{self.path}") == 0:
            raise CdictkError(self.path, "", "cannot listen on this socket")
        await server.start()
        return server

    def stop(self) -> None:
        """Stop serving: open streams end, the socket is removed."""
        with self._lock:
            self._stopped = True
            serving, self._serving = self._serving, None
        if serving is not None:
            serving.loop.call_soon_threadsafe(self._wake_streams)  # they see _stopped and end
            serving.close()
            del serving
            # grpcio's asyncio stack shuts itself down when its last object is freed, joining its
            # poller thread: freed here, not by the collector of a child forked later (discovery's
            # NVML query), where that thread does not exist and the join never ends.
            gc.collect()
        if os.path.lexists(self.path):
            os.unlink(self.path)

    def socket_gone(self) -> bool:
        """Whether our socket file was removed (the kubelet deletes them all when it starts)."""
        return not os.path.lexists(self.path)

    def update(self, resource: Resource | None = None) -> None:
        """New devices, or new health: every stream sends the list again."""
        with self._lock:
            if resource is not None:
                self.resource = resource
            self._generation += 1
            serving = self._serving
        if serving is not None:
            with contextlib.suppress(RuntimeError):  # stopped meanwhile: no stream to wake
                serving.loop.call_soon_threadsafe(self._wake_streams)

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


@dataclass
class _Serving:
    """A started server: its loop, the loop's thread, the pool of its calls that may wait."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    pool: futures.ThreadPoolExecutor
    server: grpc.aio.Server | None = None

    def close(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(STOP_GRACE), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
        self.pool.shutdown(wait=False)
