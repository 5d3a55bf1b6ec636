"""The DRA service as the kubelet calls it: a v1 and a v1beta1 client on one real Unix socket, prepare and
unprepare on the fake eight-GPU node (GPU 0 in MIG mode), claims read from a fake API server client."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdictk.api import NodeSpecs
from cdictk.dra import cdinames, service
from cdictk.dra.checkpoint import Checkpoint
from cdictk.dra.kubeclient import KubeError
from cdictk.dra.kubeletapi import dra_v1_pb2 as v1
from cdictk.dra.kubeletapi import dra_v1_pb2_grpc as v1_grpc
from cdictk.dra.kubeletapi import dra_v1beta1_pb2 as v1beta1
from cdictk.dra.kubeletapi import dra_v1beta1_pb2_grpc as v1beta1_grpc
from cdictk.dra.preparer import Preparer
from cdictk.unixgrpc import UnixServer
from tests.conftest import require_node_tools
from tests.fakenode.node import FakeNode, build_node
from tests.rootmarker import root_only

pytestmark = pytest.mark.root

DRIVER = "gpu.nvidia.com"
POOL = "node1"
A = "aaaaaaaa-7c1e-4b6a-9d5e-2f6c0e4a1b23"
B = "bbbbbbbb-7c1e-4b6a-9d5e-2f6c0e4a1b23"
C = "cccccccc-7c1e-4b6a-9d5e-2f6c0e4a1b23"
MIG = "gpu-0-mig-1g10gb-19-4"
SHARE = "7f0c3b1e-1d2a-4e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture(scope="module")
@root_only
def node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> FakeNode:
    require_node_tools()
    return build_node(str(tmp_path_factory.mktemp("service") / "node"), "eight", stub_cache)


@pytest.fixture(scope="module")
def specs(node: FakeNode) -> NodeSpecs:
    found = NodeSpecs(
        node.root,
        proc_root=node.proc,
        sys_root=node.sys,
        vendor=cdinames.VENDOR,
        device_class=cdinames.DEVICE_CLASS,
        max_age=float("inf"),
    )
    # Discovered before any server runs, as the plugin does: NVML's child is forked, and a fork from
    # a gRPC server's thread (with grpcio's fork handlers on) can crash the child.
    found.refresh()
    return found


class FakeClaims:
    """The API server's claims by namespace and name; a missing one is the server's 404."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: list[tuple[str, str]] = []

    def put(self, uid: str, name: str, *results: dict[str, Any]) -> None:
        self.claims[("team", name)] = {
            "metadata": {"namespace": "team", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": list(results)}}},
        }

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append((namespace, name))
        found = self.claims.get((namespace, name))
        if found is None:
            raise KubeError(
                f'read ResourceClaim {namespace}/{name}: 404 Not Found: resourceclaims "{name}" not found',
                404,
            )
        return found


class Served:
    def __init__(self, claims: FakeClaims, spec_dir: Path, channel: grpc.Channel) -> None:
        self.claims = claims
        self.spec_dir = spec_dir
        self.v1 = v1_grpc.DRAPluginStub(channel)
        self.v1beta1 = v1beta1_grpc.DRAPluginStub(channel)

    def spec_files(self) -> list[str]:
        return sorted(p.name for p in self.spec_dir.iterdir()) if self.spec_dir.exists() else []


@pytest.fixture
def served(tmp_path: Path, specs: NodeSpecs) -> Iterator[Served]:
    proc = tmp_path / "proc"
    (proc / "sys/kernel/random").mkdir(parents=True)
    (proc / "sys/kernel/random/boot_id").write_text("5d0c4a8e-2b1f-4c3d-9e8f-7a6b5c4d3e2f\n")
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir(mode=0o750)
    spec_dir = tmp_path / "cdi"
    preparer = Preparer(
        driver=DRIVER,
        pool=POOL,
        node=specs,
        specs=cdinames.claim_specs(str(spec_dir)),
        checkpoint=Checkpoint(str(plugin_dir), proc_root=str(proc)),
    )
    claims = FakeClaims()
    dra = service.DraService(preparer, claims)
    # Under /tmp: a Unix socket path has 107 bytes, and pytest's paths grow with test names.
    sockets = tempfile.mkdtemp(prefix="cdictk-dra-", dir="/tmp")
    server = UnixServer(
        f"{sockets}/dra.sock", lambda s: service.add_to_server(dra, s), name="dra-test", workers=2
    )
    server.start()
    channel = grpc.insecure_channel(f"unix://{sockets}/dra.sock")
    try:
        yield Served(claims, spec_dir, channel)
    finally:
        channel.close()
        server.stop()
        shutil.rmtree(sockets, ignore_errors=True)


def result(device: str, request: str = "gpu", **more: Any) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": POOL, "device": device, **more}


def cdi_id(uid: str, device: str) -> str:
    return f"k8s.gpu.nvidia.com/claim={uid}-{device}"


def test_v1_prepares_each_claim_and_unprepares_it(served: Served) -> None:
    served.claims.put(A, "a", result("gpu-1"))
    served.claims.put(B, "b", result(MIG, request="small"), result("gpu-2", request="big/large"))
    answer = served.v1.NodePrepareResources(
        v1.NodePrepareResourcesRequest(
            claims=[v1.Claim(namespace="team", name="a", uid=A), v1.Claim(namespace="team", name="b", uid=B)]
        ),
        timeout=30,
    )
    assert set(answer.claims) == {A, B}
    assert answer.claims[A].error == ""
    [device] = answer.claims[A].devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (["gpu"], POOL, "gpu-1")
    assert list(device.cdi_device_ids) == [cdi_id(A, "gpu-1")]
    assert not device.HasField("share_id")
    assert [(list(d.request_names), d.device_name) for d in answer.claims[B].devices] == [
        (["small"], MIG),
        (["big"], "gpu-2"),
    ]
    assert served.spec_files() == [f"k8s.gpu.nvidia.com-claim_{A}.json", f"k8s.gpu.nvidia.com-claim_{B}.json"]
    gone = served.v1.NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace="team", name="a", uid=A)]), timeout=30
    )
    assert dict(gone.claims) == {A: v1.NodeUnprepareResourceResponse(error="")}
    assert served.spec_files() == [f"k8s.gpu.nvidia.com-claim_{B}.json"]


def test_v1beta1_is_served_on_the_same_socket_and_answers_the_same(served: Served) -> None:
    served.claims.put(A, "a", result("gpu-3"))
    request = v1beta1.NodePrepareResourcesRequest(claims=[v1beta1.Claim(namespace="team", name="a", uid=A)])
    answer = served.v1beta1.NodePrepareResources(request, timeout=30)
    [device] = answer.claims[A].devices
    assert (device.device_name, list(device.cdi_device_ids)) == ("gpu-3", [cdi_id(A, "gpu-3")])
    # the same claim again (a kubelet restart replays it): the same answer, through the other version
    again = served.v1.NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="team", name="a", uid=A)]), timeout=30
    )
    assert [d.device_name for d in again.claims[A].devices] == ["gpu-3"]
    gone = served.v1beta1.NodeUnprepareResources(
        v1beta1.NodeUnprepareResourcesRequest(claims=[v1beta1.Claim(namespace="team", name="a", uid=A)]),
        timeout=30,
    )
    assert gone.claims[A].error == ""
    assert served.spec_files() == []


def test_v1_answers_carry_the_share_id_v1beta1_has_none(served: Served) -> None:
    served.claims.put(A, "a", result("gpu-4", shareID=SHARE))
    served.claims.put(B, "b", result("gpu-4", shareID=SHARE))
    one = served.v1.NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="team", name="a", uid=A)]), timeout=30
    )
    assert one.claims[A].devices[0].share_id == SHARE
    other = served.v1beta1.NodePrepareResources(
        v1beta1.NodePrepareResourcesRequest(claims=[v1beta1.Claim(namespace="team", name="b", uid=B)]),
        timeout=30,
    )
    assert other.claims[B].error == ""
    assert other.claims[B].devices[0].device_name == "gpu-4"


def test_a_claim_that_cannot_be_read_or_prepared_is_its_own_error_line(served: Served) -> None:
    served.claims.put(A, "a", result("gpu-5"))
    served.claims.put(C, "c", {**result("gpu-6"), "pool": "node2"})
    answer = served.v1.NodePrepareResources(
        v1.NodePrepareResourcesRequest(
            claims=[
                v1.Claim(namespace="team", name="gone", uid=B),
                v1.Claim(namespace="team", name="a", uid=A),
                v1.Claim(namespace="team", name="c", uid=C),
            ]
        ),
        timeout=30,
    )
    assert set(answer.claims) == {A, B, C}
    assert answer.claims[B].error == (
        'read ResourceClaim team/gone: 404 Not Found: resourceclaims "gone" not found'
    )
    assert not answer.claims[B].devices
    assert "another node's pool node2" in answer.claims[C].error
    assert "\n" not in answer.claims[C].error
    assert answer.claims[A].error == "" and answer.claims[A].devices[0].device_name == "gpu-5"
    assert served.spec_files() == [f"k8s.gpu.nvidia.com-claim_{A}.json"]


def test_an_empty_request_is_an_empty_answer_and_reads_nothing(served: Served) -> None:
    assert not served.v1.NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=30).claims
    assert not served.v1beta1.NodeUnprepareResources(
        v1beta1.NodeUnprepareResourcesRequest(), timeout=30
    ).claims
    assert served.claims.reads == []


def test_unprepare_of_a_claim_never_prepared_succeeds_without_a_read(served: Served) -> None:
    gone = served.v1.NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace="team", name="x", uid=C)]), timeout=30
    )
    assert dict(gone.claims) == {C: v1.NodeUnprepareResourceResponse()}
    assert served.claims.reads == []


def test_a_claim_without_its_uid_fails_the_whole_call(served: Served) -> None:
    served.claims.put(A, "a", result("gpu-7"))
    request = v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace="team", name="a", uid=A), v1.Claim(namespace="team", name="b")]
    )
    with pytest.raises(grpc.RpcError) as raised:
        served.v1.NodePrepareResources(request, timeout=30)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "claims[1] has no uid"
    assert served.claims.reads == [] and served.spec_files() == []  # nothing done for the first either
    with pytest.raises(grpc.RpcError) as raised:
        served.v1beta1.NodeUnprepareResources(
            v1beta1.NodeUnprepareResourcesRequest(claims=[v1beta1.Claim(uid=A)]), timeout=30
        )
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "claims[0] has no namespace or name"
