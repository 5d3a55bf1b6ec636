"""The API server calls through the official client, against the API server stand-in: JSON dicts in and
out, resource.k8s.io v1 or v1beta1 (asked of the server), the kubeconfig or the pod's service account,
and every failure one line naming the call and what the server said."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.dra.kubeclient import KubeClient, KubeError
from cdictk.dra.slices import V1, V1BETA1, resource_slices
from tests.e2e.kubelet.apiserver import ApiServer, running

DRIVER = "gpu.nvidia.com"
NODE = "node1"
TOKEN = "s3cret"  # noqa: S105 (the stand-in's)


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with running(token=TOKEN) as started:
        yield started


@pytest.fixture
def kube(server: ApiServer, tmp_path: Path) -> Iterator[KubeClient]:
    made = KubeClient.from_kubeconfig(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    yield made
    made.close()


def failure(call: object) -> KubeError:
    with pytest.raises(KubeError) as raised:
        call()  # type: ignore[operator]
    assert "\n" not in str(raised.value)
    return raised.value


def test_slices_are_created_listed_replaced_and_deleted(server: ApiServer, kube: KubeClient) -> None:
    uid = server.add_node(NODE)
    assert kube.node_uid(NODE) == uid
    (wanted,) = resource_slices([], NODE, node_uid=uid)
    created = kube.create_slice(wanted)
    name = created["metadata"]["name"]
    assert name.startswith("00000-gpu.nvidia.com-node1-") and len(name) > len(
        wanted["metadata"]["generateName"]
    )
    assert created["spec"] == wanted["spec"]
    assert created["metadata"]["ownerReferences"][0]["uid"] == uid
    # Another driver's slice and another node's are not listed.
    kube.create_slice(resource_slices([], NODE, driver="other.example.com")[0])
    kube.create_slice(resource_slices([], "node2")[0])
    assert [item["metadata"]["name"] for item in kube.list_slices(DRIVER, NODE)] == [name]
    created["spec"]["pool"]["generation"] = 2
    replaced = kube.replace_slice(name, created)
    assert replaced["spec"]["pool"]["generation"] == 2
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    kube.delete_slice(name)
    assert kube.list_slices(DRIVER, NODE) == []
    assert [(write.verb, write.name) for write in server.writes][-2:] == [("update", name), ("delete", name)]


def test_a_claim_is_read_as_stored(server: ApiServer, kube: KubeClient) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
                }
            }
        },
    }
    stored = server.put_claim(claim)
    assert kube.read_claim("default", "gpu") == stored


def test_a_missing_claim_is_one_line_with_the_servers_message(kube: KubeClient) -> None:
    error = failure(lambda: kube.read_claim("default", "gone"))
    assert (
        str(error)
        == 'read ResourceClaim default/gone: 404 Not Found: resourceclaims.resource.k8s.io "gone" not found'
    )
    assert error.status == 404


def test_a_refused_write_is_one_line_with_the_servers_message(server: ApiServer, kube: KubeClient) -> None:
    created = kube.create_slice(resource_slices([], NODE)[0])
    name = created["metadata"]["name"]
    created["spec"]["nodeName"] = "node2"
    error = failure(lambda: kube.replace_slice(name, created))
    assert str(error) == (
        f'replace ResourceSlice {name}: 422 Unprocessable Entity: ResourceSlice.resource.k8s.io "{name}" is '
        "invalid: spec.nodeName: Invalid value: field is immutable"
    )
    assert error.status == 422


def test_a_stale_replace_is_a_conflict(kube: KubeClient) -> None:
    created = kube.create_slice(resource_slices([], NODE)[0])
    name = created["metadata"]["name"]
    kube.replace_slice(name, created)
    error = failure(lambda: kube.replace_slice(name, created))
    assert error.status == 409 and str(error).startswith(f"replace ResourceSlice {name}: 409 Conflict: ")


def test_an_unknown_field_is_refused_in_one_line(kube: KubeClient) -> None:
    wanted = resource_slices([], NODE)[0]
    wanted["spec"]["bogus"] = 1
    error = failure(lambda: kube.create_slice(wanted))
    assert str(error).startswith("create ResourceSlice 00000-gpu.nvidia.com-node1-") and "bogus" in str(error)
    # The client's models refuse it (37 and later: no status) or, where they let dicts through (34),
    # the server does.
    assert error.status in {None, 422}


def test_a_wrong_token_is_one_line(server: ApiServer, tmp_path: Path) -> None:
    server.token = "other"  # noqa: S105
    kube = KubeClient.from_kubeconfig(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    server.token = TOKEN
    error = failure(lambda: kube.node_uid(NODE))
    assert str(error) == "read Node node1: 401 Unauthorized: Unauthorized"


def test_a_server_that_is_not_there_is_one_line(server: ApiServer, kube: KubeClient) -> None:
    server.stop()
    error = failure(lambda: kube.list_slices(DRIVER, NODE))
    assert str(error).startswith(f"list ResourceSlices of {DRIVER} on {NODE}: ")
    assert error.status is None


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_the_served_version_is_asked_of_the_server(version: str, tmp_path: Path) -> None:
    with running(version=version) as server:
        kube = KubeClient.from_kubeconfig(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        served = kube.served_version()
        assert served == f"resource.k8s.io/{version}"
        # A client of that version creates and lists its slices; the other version is not there.
        spoken = KubeClient(kube.api_client, served)
        spoken.create_slice(resource_slices([], NODE, api_version=served)[0])
        assert len(spoken.list_slices(DRIVER, NODE)) == 1
        other = KubeClient(kube.api_client, V1BETA1 if served == V1 else V1)
        assert failure(lambda: other.list_slices(DRIVER, NODE)).status == 404


def test_a_server_without_either_version_is_one_line(server: ApiServer, kube: KubeClient) -> None:
    server.version = "v1alpha3"
    assert str(failure(kube.served_version)) == (
        "the API server serves neither resource.k8s.io/v1 nor resource.k8s.io/v1beta1 "
        "(it has resource.k8s.io/v1alpha3)"
    )


def test_an_unknown_api_version_is_refused(kube: KubeClient) -> None:
    with pytest.raises(KubeError, match=r"unknown API version 'resource\.k8s\.io/v2'"):
        KubeClient(kube.api_client, "resource.k8s.io/v2")


def test_a_broken_kubeconfig_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    error = failure(lambda: KubeClient.from_kubeconfig(str(path)))
    assert str(error).startswith(f"Kubernetes client configuration from {path}: ")


def test_without_a_kubeconfig_the_pods_service_account_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # Outside a pod: the in-cluster configuration is what fails, and says so.
    error = failure(KubeClient.from_kubeconfig)
    assert str(error).startswith(
        "Kubernetes client configuration from the default kubeconfig or the pod's service account: "
    )
    assert "Service host/port is not set" in str(error)
