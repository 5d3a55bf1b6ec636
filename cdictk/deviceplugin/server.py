"""One resource's gRPC server: the ``v1beta1.DevicePlugin`` service on its socket in the kubelet's
device plugin directory.

The handlers are grpcio's generic ones over our dataclass codec (no generated stubs). ``ListAndWatch``
sends the whole list at once and again on every change (health, devices), and ends when the server
stops; each stream holds one of the pool's threads, and the kubelet keeps one per plugin.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from cdictk.api import CdictkError
from cdictk.deviceplugin.allocation import allocate
from cdictk.deviceplugin.messages import (
    CODEC,
    HEALTHY,
    UNHEALTHY,
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
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.resources import Resource
from cdictk.deviceplugin.topology import Links, preferred

OPTIONS = DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)
SOCKET_PATH_MAX = 107  # sockaddr_un's sun_path, less its terminating NUL


class ResourceServer:
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
        self._changed = threading.Condition()
        self._generation = 0
        self._stopped = False
        self._server: grpc.Server | None = None

    # ---- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the socket (a stale one removed first): the kubelet dials it while we register."""
        if len(os.fsencode(self.path)) > SOCKET_PATH_MAX:
            raise CdictkError(
                self.path,
                "",
                f"longer than a Unix socket path may be ({SOCKET_PATH_MAX} bytes): a shorter resource name "
                "(sharing.timeSlicing.resources[].rename) or plugin directory",
            )
        if os.path.lexists(self.path):
            os.unlink(self.path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="device-plugin"))
        server.add_generic_rpc_handlers((self._handlers(),))
        if server.add_insecure_port(f"unix://{self.path}") == 0:
            raise CdictkError(self.path, "", "cannot listen on this socket")
        server.start()
        self._server = server
        self._stopped = False

    def stop(self) -> None:
        """Stop serving: open streams end, the socket is removed."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        if self._server is not None:
            self._server.stop(grace=1).wait()
            self._server = None
        if os.path.lexists(self.path):
            os.unlink(self.path)

    def socket_gone(self) -> bool:
        """Whether our socket file was removed (the kubelet deletes them all when it starts)."""
        return not os.path.lexists(self.path)

    def update(self, resource: Resource | None = None) -> None:
        """New devices, or new health: every stream sends the list again."""
        with self._changed:
            if resource is not None:
                self.resource = resource
            self._generation += 1
            self._changed.notify_all()

    # ---- the service ---------------------------------------------------------------------------

    def devices(self) -> list[Device]:
        unhealthy = self.health()
        return [
            Device(
                device.id,
                UNHEALTHY if device.uuid in unhealthy or device.gpu_uuid in unhealthy else HEALTHY,
                TopologyInfo([NUMANode(device.numa)]) if device.numa is not None else None,
            )
            for device in self.resource.devices
        ]

    def get_options(self, request: Empty, context: grpc.ServicerContext) -> DevicePluginOptions:
        return OPTIONS

    def list_and_watch(self, request: Empty, context: grpc.ServicerContext) -> Iterator[ListAndWatchResponse]:
        seen = -1
        while True:
            with self._changed:
                while self._generation == seen and not self._stopped and context.is_active():
                    self._changed.wait(timeout=1.0)
                if self._stopped or not context.is_active():
                    return
                seen = self._generation
            yield ListAndWatchResponse(self.devices())

    def preferred_allocation(
        self, request: PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> PreferredAllocationResponse:
        answers = []
        for container in request.container_requests:
            chosen = preferred(
                self.resource,
                container.available_deviceIDs,
                container.must_include_deviceIDs,
                container.allocation_size,
                self.links(),
            )
            answers.append(ContainerPreferredAllocationResponse(chosen))
        return PreferredAllocationResponse(answers)

    def allocate(self, request: AllocateRequest, context: grpc.ServicerContext) -> AllocateResponse:
        answers = []
        for container in request.container_requests:
            try:
                answers.append(allocate(self.resource, container.devices_ids, self.settings, self.unresolved))
            except CdictkError as exc:
                self.log(f"Allocate {', '.join(container.devices_ids)}: {exc}")
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return AllocateResponse(answers)

    def pre_start(
        self, request: PreStartContainerRequest, context: grpc.ServicerContext
    ) -> PreStartContainerResponse:
        return PreStartContainerResponse()

    def _handlers(self) -> grpc.GenericRpcHandler:
        def unary(
            function: Callable[[Any, grpc.ServicerContext], Any], kind: type
        ) -> grpc.RpcMethodHandler[Any, Any]:
            return grpc.unary_unary_rpc_method_handler(
                function,
                request_deserializer=CODEC.deserializer(kind),
                response_serializer=CODEC.serializer(),
            )

        return grpc.method_handlers_generic_handler(
            "v1beta1.DevicePlugin",
            {
                "GetDevicePluginOptions": unary(self.get_options, Empty),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch,
                    request_deserializer=CODEC.deserializer(Empty),
                    response_serializer=CODEC.serializer(),
                ),
                "GetPreferredAllocation": unary(self.preferred_allocation, PreferredAllocationRequest),
                "Allocate": unary(self.allocate, AllocateRequest),
                "PreStartContainer": unary(self.pre_start, PreStartContainerRequest),
            },
        )
