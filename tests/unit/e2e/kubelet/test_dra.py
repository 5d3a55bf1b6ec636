"""The kubelet stand-in's DRA side against a plugin of the test's own: registration as the plugin
watcher does it (type, version choice, refusals, a socket that goes), prepare batched per driver with
each failure one line, and unprepare only when a claim's last pod has gone."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from cdictk.dra.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc
from cdictk.dra.kubeletapi.pluginregistration_pb2 import (
    InfoRequest,
    PluginInfo,
    RegistrationStatus,
    RegistrationStatusResponse,
)
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import (
    RegistrationServicer,
    add_RegistrationServicer_to_server,
)
from tests.e2e.kubelet.allocator import Pod, write_allocation
from tests.e2e.kubelet.apiserver import ApiServer
from tests.e2e.kubelet.dra import DraError, DraKubelet, container_cdi_ids

DRIVER = "gpu.nvidia.com"
POD = "11111111-1111-1111-1111-111111111111"
OTHER_POD = "22222222-2222-2222-2222-222222222222"


@dataclass
class FakePlugin(RegistrationServicer, dra_v1_pb2_grpc.DRAPluginServicer):
    """A DRA plugin serving registration and v1 DRA on two sockets; what it was asked is recorded."""

    directory: str
    name: str = DRIVER
    plugin_type: str = "DRAPlugin"
    versions: tuple[str, ...] = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    errors: dict[str, str] = field(default_factory=dict)  # claim UID -> its prepare error
    statuses: list[RegistrationStatus] = field(default_factory=list)
    prepares: list[list[str]] = field(default_factory=list)
    unprepares: list[list[str]] = field(default_factory=list)
    servers: list[grpc.Server] = field(default_factory=list)

    @property
    def registration_socket(self) -> str:
        return os.path.join(self.directory, "registry", f"{self.name}-reg.sock")

    @property
    def endpoint(self) -> str:
        return os.path.join(self.directory, f"{self.name}.sock")

    def start(self) -> None:
        os.makedirs(os.path.dirname(self.registration_socket), exist_ok=True)
        for socket in (self.endpoint, self.registration_socket):
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
            if socket == self.endpoint:
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(self, server)
            else:
                add_RegistrationServicer_to_server(self, server)
            server.add_insecure_port(f"unix://{socket}")
            server.start()
            self.servers.append(server)

    def stop(self) -> None:
        for server in self.servers:
            server.stop(grace=None).wait()
        self.servers.clear()
        for socket in (self.endpoint, self.registration_socket):
            if os.path.lexists(socket):
                os.unlink(socket)

    def GetInfo(self, request: InfoRequest, context: Any) -> PluginInfo:
        return PluginInfo(
            type=self.plugin_type, name=self.name, endpoint=self.endpoint, supported_versions=self.versions
        )

    def NotifyRegistrationStatus(
        self, request: RegistrationStatus, context: Any
    ) -> RegistrationStatusResponse:
        self.statuses.append(request)
        return RegistrationStatusResponse()

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: Any
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        self.prepares.append([claim.uid for claim in request.claims])
        answer = dra_v1_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            if claim.uid in self.errors:
                answer.claims[claim.uid].error = self.errors[claim.uid]
                continue
            answer.claims[claim.uid].devices.extend(
                [
                    dra_v1_pb2.Device(
                        request_names=["gpu"], pool_name="node1", device_name="gpu-1",
                        cdi_device_ids=[f"k8s.gpu.nvidia.com/claim={claim.uid}-gpu-1"],
                    ),
                    dra_v1_pb2.Device(
                        pool_name="node1", device_name="gpu-2",
                        cdi_device_ids=[f"k8s.gpu.nvidia.com/claim={claim.uid}-gpu-2"],
                    ),
                ]
            )  # fmt: skip
        return answer

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: Any
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        self.unprepares.append([claim.uid for claim in request.claims])
        answer = dra_v1_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer.claims[claim.uid].error = ""
        return answer


@pytest.fixture
def directory() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="dra-", dir="/tmp")  # sockets want short paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server() -> ApiServer:
    return ApiServer()


def plugin_and_kubelet(directory: str, server: ApiServer, **changes: Any) -> tuple[FakePlugin, DraKubelet]:
    plugin = FakePlugin(directory, **changes)
    plugin.start()
    kubelet = DraKubelet(os.path.join(directory, "registry"), server)
    kubelet.scan()
    return plugin, kubelet


def allocated(server: ApiServer, name: str, *pods: str, driver: str = DRIVER) -> str:
    claim = server.put_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            },
        }
    )
    result = {"request": "gpu", "driver": driver, "pool": "node1", "device": "gpu-1"}
    write_allocation(server, claim, [result], "node1", [Pod(f"pod-{p[:4]}", p) for p in pods])
    return str(claim["metadata"]["uid"])


def test_a_plugin_is_registered_with_the_first_version_known(directory: str, server: ApiServer) -> None:
    plugin, kubelet = plugin_and_kubelet(directory, server, versions=("v9.DRAPlugin", "v1beta1.DRAPlugin"))
    try:
        assert kubelet.drivers[DRIVER].version == "v1beta1.DRAPlugin"
        assert isinstance(kubelet.drivers[DRIVER].stub, dra_v1beta1_pb2_grpc.DRAPluginStub)
        assert [(s.plugin_registered, s.error) for s in plugin.statuses] == [(True, "")]
        assert kubelet.registered(DRIVER) == 1
        kubelet.scan()  # the same socket: nothing new
        assert kubelet.registered(DRIVER) == 1
    finally:
        plugin.stop()
    kubelet.scan()
    assert DRIVER not in kubelet.drivers  # its socket went: unregistered


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"plugin_type": "CSIPlugin"}, "no handler registered for plugin type: CSIPlugin"),
        ({"versions": ()}, f"plugin {DRIVER} supports no version"),
        ({"versions": ("v1alpha4.Node",)}, "none of the versions ['v1alpha4.Node'] of plugin"),
    ],
)
def test_a_plugin_the_kubelet_cannot_use_is_told_why(
    directory: str, server: ApiServer, changes: dict[str, Any], reason: str
) -> None:
    plugin, kubelet = plugin_and_kubelet(directory, server, **changes)
    try:
        [status] = plugin.statuses
        assert not status.plugin_registered and reason in status.error
        assert kubelet.drivers == {}
    finally:
        plugin.stop()


def test_claims_are_prepared_in_one_call_per_driver_and_unprepared_with_their_last_pod(
    directory: str, server: ApiServer
) -> None:
    plugin, kubelet = plugin_and_kubelet(directory, server)
    try:
        first = allocated(server, "a", POD, OTHER_POD)
        second = allocated(server, "b", POD)
        prepared = kubelet.prepare(POD, [("default", "a"), ("default", "b")])
        assert plugin.prepares == [[first, second]]
        assert prepared[first] == {
            "gpu": [f"k8s.gpu.nvidia.com/claim={first}-gpu-1"],
            "": [f"k8s.gpu.nvidia.com/claim={first}-gpu-2"],
        }
        assert container_cdi_ids(prepared, first, "gpu") == [
            f"k8s.gpu.nvidia.com/claim={first}-gpu-2",
            f"k8s.gpu.nvidia.com/claim={first}-gpu-1",
        ]
        assert kubelet.prepare(OTHER_POD, [("default", "a")]) == {first: prepared[first]}
        assert plugin.prepares == [[first, second]]  # prepared already: no second call
        assert sorted(kubelet.unprepare(POD)) == [second]
        assert plugin.unprepares == [[second]]
        assert kubelet.unprepare(OTHER_POD) == [first]
        assert plugin.unprepares == [[second], [first]]
    finally:
        plugin.stop()


def test_each_failure_is_one_line(directory: str, server: ApiServer) -> None:
    plugin, kubelet = plugin_and_kubelet(directory, server)
    try:
        uid = allocated(server, "bad", POD)
        plugin.errors[uid] = "claim default/bad: device gpu-1 is not a device of this node"
        with pytest.raises(
            DraError, match=rf"^prepare of ResourceClaim default/bad by {DRIVER} failed: claim "
        ):
            kubelet.prepare(POD, [("default", "bad")])
        assert kubelet.claims == {}  # tried again with the pod's next sync
        with pytest.raises(
            DraError, match=rf"^pod {OTHER_POD} is not allowed to use ResourceClaim default/bad$"
        ):
            kubelet.prepare(OTHER_POD, [("default", "bad")])
        with pytest.raises(DraError, match=r'^resourceclaims.resource.k8s.io "nope" not found$'):
            kubelet.prepare(POD, [("default", "nope")])
        allocated(server, "elsewhere", POD, driver="gpu.example.com")
        with pytest.raises(DraError, match=r"^DRA driver gpu.example.com is not registered$"):
            kubelet.prepare(POD, [("default", "elsewhere")])
    finally:
        plugin.stop()
    with pytest.raises(DraError, match=rf"^NodePrepareResources of {DRIVER} failed: "):
        kubelet.prepare(POD, [("default", "bad")])  # registered, but gone without the kubelet seeing it
