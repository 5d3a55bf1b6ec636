"""One resource's gRPC server, driven by the kubelet stand-in: the lists ListAndWatch sends (health,
NUMA nodes, new devices), Allocate's refusals, GetPreferredAllocation on the links it is given, every
call answered while a peer holds many streams open, and what stopping leaves."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import grpc
import pytest

from cdictk.deviceplugin.kubelet import HEALTHY, UNHEALTHY
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.proto.deviceplugin_pb2 import (
    AllocateRequest,
    ContainerAllocateRequest,
    ContainerPreferredAllocationRequest,
    Empty,
    PreferredAllocationRequest,
    PreStartContainerRequest,
)
from cdictk.deviceplugin.proto.deviceplugin_pb2_grpc import DevicePluginStub
from cdictk.deviceplugin.registration import register
from cdictk.deviceplugin.resources import PluginDevice, Resource
from cdictk.deviceplugin.server import ResourceServer
from cdictk.startpath.helpers.errors import CdictkError
from tests.e2e.kubelet.kubelet import Kubelet

GPU = "nvidia.com/gpu"
DEVICES = (
    PluginDevice("GPU-0", "GPU-0", 0, "GPU-0", numa=0),
    PluginDevice("GPU-1", "GPU-1", 1, "GPU-1", numa=1),
    PluginDevice("GPU-2", "GPU-2", 2, "GPU-2"),
)


class Served:
    def __init__(self, plugin_dir: str) -> None:
        self.unhealthy: dict[str, str] = {}
        self.links: dict[frozenset[str], int] = {}
        self.lines: list[str] = []
        self.kubelet = Kubelet(plugin_dir)
        self.server = ResourceServer(
            Resource(GPU, DEVICES),
            Settings(plugin_dir=plugin_dir),
            health=lambda: dict(self.unhealthy),
            links=lambda: dict(self.links),
            unresolved=lambda names: [n for n in names if n.endswith("GPU-2")],
            log=self.lines.append,
        )

    def health(self) -> dict[str, str]:
        return self.kubelet.health(GPU)


@pytest.fixture
def served() -> Iterator[Served]:
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-srv-", dir="/tmp")  # socket paths are short
    running = Served(plugin_dir)
    running.kubelet.start()
    open(running.server.path, "w").close()  # a stale file where the socket goes: replaced
    running.server.start()
    register(plugin_dir, GPU, running.server.resource.socket)
    running.kubelet.wait_for("the list", lambda k: len(k.devices(GPU)) == 3)
    yield running
    running.server.stop()
    running.kubelet.stop()
    shutil.rmtree(plugin_dir, ignore_errors=True)


def test_the_list_has_every_device_healthy_with_its_numa_node(served: Served) -> None:
    devices = served.kubelet.devices(GPU)
    assert [(d.ID, d.health) for d in devices] == [("GPU-0", HEALTHY), ("GPU-1", HEALTHY), ("GPU-2", HEALTHY)]
    assert [d.topology.nodes[0].ID if d.HasField("topology") else None for d in devices] == [0, 1, None]


def test_a_change_of_health_sends_the_list_again(served: Served) -> None:
    updates = served.kubelet.endpoints[GPU].updates
    served.unhealthy["GPU-1"] = "Xid 79"
    served.server.update()
    served.kubelet.wait_for("GPU-1 unhealthy", lambda k: k.health(GPU)["GPU-1"] == UNHEALTHY)
    assert served.health() == {"GPU-0": HEALTHY, "GPU-1": UNHEALTHY, "GPU-2": HEALTHY}
    assert served.kubelet.endpoints[GPU].updates == updates + 1


def test_a_mig_device_is_unhealthy_with_its_gpu(served: Served) -> None:
    mig = PluginDevice("MIG-1", "MIG-1", 0, "GPU-0", gi=1, ci=0)
    served.server.update(Resource(GPU, (mig, *DEVICES[1:])))
    served.kubelet.wait_for("the new list", lambda k: "MIG-1" in k.health(GPU))
    served.unhealthy["GPU-0"] = "GPU is lost"
    served.server.update()
    served.kubelet.wait_for("MIG-1 unhealthy", lambda k: k.health(GPU)["MIG-1"] == UNHEALTHY)


def test_allocate_refusals_are_invalid_argument_and_logged(served: Served) -> None:
    assert served.kubelet.allocate_ids(GPU, ["GPU-0"]).cdi_devices
    with pytest.raises(grpc.RpcError) as refused:
        served.kubelet.allocate_ids(GPU, ["GPU-2"])
    error = refused.value
    assert isinstance(error, grpc.Call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no CDI spec defines nvidia.com/gpu=GPU-2" in (error.details() or "")
    assert any(line.startswith("Allocate GPU-2: ") for line in served.lines)


def test_preferred_allocation_asks_for_the_links_each_time(served: Served) -> None:
    ids = ["GPU-0", "GPU-1", "GPU-2"]
    assert served.kubelet.preferred(GPU, ids, [], 2) == ["GPU-0", "GPU-1"]
    served.links[frozenset(("GPU-1", "GPU-2"))] = 100
    assert served.kubelet.preferred(GPU, ids, [], 2) == ["GPU-1", "GPU-2"]


PEER_STREAMS = 32
# A call's deadline here: an answer takes about a millisecond (make bench-deviceplugin prints it);
# one that waits for a stream to end never comes.
DEADLINE = 2.0


def test_a_peer_holding_many_streams_keeps_no_call_and_not_the_kubelets_stream_waiting(
    served: Served,
) -> None:
    """A kubelet that reconnected without closing, or a monitoring tool, holds streams open: every
    unary call still answers, and the kubelet's own stream (made anew by registering again) is
    served and sent each change."""
    peer = grpc.insecure_channel(f"unix://{served.server.path}")
    listen = DevicePluginStub(peer).ListAndWatch
    # a deadline on each, so that a stream the server never takes up fails the test rather than hangs it
    streams = [listen(Empty(), timeout=10) for _ in range(PEER_STREAMS)]
    try:
        for stream in streams:
            assert [d.ID for d in next(stream).devices] == ["GPU-0", "GPU-1", "GPU-2"]
        kubelet = served.kubelet.endpoints[GPU].channel
        for channel in (kubelet, peer):
            stub = DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(Empty(), timeout=DEADLINE)
            assert options.get_preferred_allocation_available
            request = AllocateRequest(container_requests=[ContainerAllocateRequest(devices_ids=["GPU-0"])])
            assert stub.Allocate(request, timeout=DEADLINE).container_responses[0].cdi_devices
            preferred = PreferredAllocationRequest(
                container_requests=[
                    ContainerPreferredAllocationRequest(
                        available_deviceIDs=["GPU-0", "GPU-1", "GPU-2"], allocation_size=1
                    )
                ]
            )
            answer = stub.GetPreferredAllocation(preferred, timeout=DEADLINE)
            assert answer.container_responses[0].deviceIDs == ["GPU-0"]
            stub.PreStartContainer(PreStartContainerRequest(devices_ids=["GPU-0"]), timeout=DEADLINE)
        # the kubelet registers again (as after its restart): its new stream is served beside the peer's
        register(served.kubelet.plugin_dir, GPU, served.server.resource.socket)
        served.kubelet.wait_for("the new stream's list", lambda k: k.endpoints[GPU].updates == 1)
        served.unhealthy["GPU-2"] = "Xid 79"
        served.server.update()
        served.kubelet.wait_for("GPU-2 unhealthy", lambda k: k.health(GPU)["GPU-2"] == UNHEALTHY)
        assert [d.health for d in next(streams[-1]).devices] == [HEALTHY, HEALTHY, UNHEALTHY]
    finally:
        peer.close()


def test_stop_ends_the_stream_and_removes_the_socket(served: Served) -> None:
    assert not served.server.socket_gone()
    served.server.stop()
    served.kubelet.wait_for("the stream's end", lambda k: k.endpoints[GPU].stream_ended)
    assert set(served.health().values()) == {UNHEALTHY}  # what the kubelet makes of it
    assert served.server.socket_gone() and not os.path.lexists(served.server.path)


def test_a_socket_path_too_long_for_unix_is_one_line_naming_it() -> None:
    long_name = "example.com/" + "g" * 90
    server = ResourceServer(Resource(long_name, DEVICES), Settings(plugin_dir="/tmp"))
    with pytest.raises(CdictkError) as raised:
        server.start()
    assert str(raised.value).startswith(f"{server.path}: longer than a Unix socket path may be (107 bytes)")
    assert not os.path.lexists(server.path)
