"""The API server stand-in over plain HTTP: what it stores passes the official schema or is a 422 as
the API server words it, slices are found by field selector and deleted by collection, names come
from generateName, a stale PUT is a 409, and a missing token a 401."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from cdictk.dra.slices import resource_slices
from tests.e2e.kubelet.apiserver import ApiServer, Refusal, running

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
TOKEN = "t"  # noqa: S105 (the stand-in's)


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with running(token=TOKEN) as started:
        yield started


def call(
    server: ApiServer, method: str, path: str, body: Any = None, token: str | None = TOKEN
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)  # noqa: S310 (http to 127.0.0.1)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def a_slice(node: str = "node1", driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return resource_slices([], node, driver=driver)[0]


def test_a_created_slice_gets_a_name_uid_and_version(server: ApiServer) -> None:
    code, created = call(server, "POST", SLICES, a_slice())
    assert code == 200
    metadata = created["metadata"]
    assert metadata["name"].startswith("00000-gpu.nvidia.com-node1-") and "generateName" not in metadata
    assert metadata["uid"] and metadata["resourceVersion"] and metadata["creationTimestamp"]
    assert call(server, "GET", f"{SLICES}/{metadata['name']}") == (200, created)


def test_an_object_the_schema_refuses_is_a_422_naming_the_field(server: ApiServer) -> None:
    item = a_slice()
    item["spec"]["pool"]["generation"] = "one"
    code, status = call(server, "POST", SLICES, item)
    assert code == 422 and status["reason"] == "Invalid" and status["code"] == 422
    # generateName has made a name by then, as in the API server.
    assert re.fullmatch(
        r'ResourceSlice.resource.k8s.io "00000-gpu.nvidia.com-node1-[0-9a-f]{5}" is invalid: '
        r"spec.pool.generation: Invalid value: 'one' is not of type 'integer'",
        status["message"],
    )
    item = a_slice()
    item["spec"]["bogus"] = True
    code, status = call(server, "POST", SLICES, item)
    assert code == 422 and "bogus" in status["message"]
    assert server.slices == {} and server.writes == []


def test_slices_are_listed_by_field_selector_and_deleted_by_collection(server: ApiServer) -> None:
    for node, driver in (
        ("node1", "gpu.nvidia.com"),
        ("node1", "other.example.com"),
        ("node2", "gpu.nvidia.com"),
    ):
        call(server, "POST", SLICES, a_slice(node, driver))

    def names(selector: str) -> list[tuple[str, str]]:
        code, listed = call(server, "GET", f"{SLICES}?fieldSelector={selector}")
        assert code == 200 and listed["kind"] == "ResourceSliceList"
        return sorted((item["spec"]["nodeName"], item["spec"]["driver"]) for item in listed["items"])

    assert names("spec.nodeName%3Dnode1") == [("node1", "gpu.nvidia.com"), ("node1", "other.example.com")]
    assert names("spec.driver%3Dgpu.nvidia.com,spec.nodeName%3Dnode2") == [("node2", "gpu.nvidia.com")]
    assert call(server, "GET", f"{SLICES}?fieldSelector=spec.pool.name%3Dx")[0] == 400
    assert call(server, "DELETE", f"{SLICES}?fieldSelector=spec.nodeName%3Dnode1")[0] == 200
    assert names("") == [("node2", "gpu.nvidia.com")]


def test_a_put_checks_the_version_the_name_and_the_immutable_fields(server: ApiServer) -> None:
    _, created = call(server, "POST", SLICES, a_slice())
    path = f"{SLICES}/{created['metadata']['name']}"
    code, updated = call(server, "PUT", path, created)
    assert code == 200 and updated["metadata"]["uid"] == created["metadata"]["uid"]
    code, status = call(server, "PUT", path, created)
    assert code == 409 and status["reason"] == "Conflict"
    assert call(server, "PUT", f"{SLICES}/other", updated)[0] == 400
    updated["spec"]["driver"] = "other.example.com"
    code, status = call(server, "PUT", path, updated)
    assert code == 422 and status["message"].endswith("spec.driver: Invalid value: field is immutable")
    assert call(server, "PUT", f"{SLICES}/gone", {**updated, "metadata": {"name": "gone"}})[0] == 404


def test_deletes_and_refusals(server: ApiServer) -> None:
    _, created = call(server, "POST", SLICES, a_slice())
    path = f"{SLICES}/{created['metadata']['name']}"
    server.refusals.append(Refusal(500, "InternalError", "etcd is away"))
    assert call(server, "DELETE", path) == (
        500,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "etcd is away",
            "reason": "InternalError",
            "code": 500,
        },
    )
    assert call(server, "DELETE", path)[0] == 200
    code, status = call(server, "DELETE", path)
    assert (
        code == 404
        and status["message"] == f'resourceslices.resource.k8s.io "{created["metadata"]["name"]}" not found'
    )
    assert [write.verb for write in server.writes] == ["create", "delete"]


def test_a_request_without_the_token_is_a_401(server: ApiServer) -> None:
    assert call(server, "GET", SLICES, token=None)[0] == 401
    assert call(server, "GET", SLICES, token="wrong")[0] == 401  # noqa: S106


def test_nodes_claims_and_discovery(server: ApiServer) -> None:
    uid = server.add_node("node1")
    code, node = call(server, "GET", "/api/v1/nodes/node1")
    assert code == 200 and node["metadata"]["uid"] == uid
    assert call(server, "GET", "/api/v1/nodes/node2")[0] == 404
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {},
    }
    server.put_claim(claim)
    assert (
        call(server, "GET", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c")[1]["metadata"]["name"]
        == "c"
    )
    with pytest.raises(Refusal, match=r'ResourceClaim.resource.k8s.io "d" is invalid: spec: .*\'typo\''):
        server.put_claim({**claim, "metadata": {"name": "d", "namespace": "ns"}, "spec": {"typo": 1}})
    code, group = call(server, "GET", "/apis/resource.k8s.io")
    assert code == 200 and group["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1"


def test_a_v1beta1_server_lacks_v1(tmp_path: Any) -> None:
    with running(version="v1beta1") as server:
        assert call(server, "POST", SLICES, a_slice())[0] == 404
        beta = resource_slices([], "node1", api_version="resource.k8s.io/v1beta1")[0]
        assert call(server, "POST", "/apis/resource.k8s.io/v1beta1/resourceslices", beta)[0] == 200
        # An object of another version than the path's is refused.
        assert call(server, "POST", "/apis/resource.k8s.io/v1beta1/resourceslices", a_slice())[0] == 400


def test_the_kubeconfig_names_the_server_and_token(server: ApiServer, tmp_path: Any) -> None:
    written = json.loads(server.write_kubeconfig(tmp_path / "kubeconfig").read_text())
    assert written["clusters"][0]["cluster"]["server"] == server.url
    assert written["users"][0]["user"] == {"token": TOKEN}
