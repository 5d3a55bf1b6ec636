"""deploy/kubernetes/dra: the DeviceClasses, the DRA plugin's RBAC and DaemonSet, and the claim examples.

Every document is validated against the Kubernetes OpenAPI schemas kubernetes-validate bundles
(strict) for 1.34, where resource.k8s.io/v1 begins, and the newest it has. Then what the schemas
cannot know: the classes select the devices cdictk.dra publishes (its driver name, its types and
attribute names), the claims name classes that exist, each container's claims are its pod's, the
shared claim is one claim named by two pods, and the plugin may do exactly what it needs.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdictk.cli.draplugin import dra_plugin_command
from cdictk.dra.nodedevices import GPU, MIG
from cdictk.dra.slices import DRIVER
from tests import REPO
from tests.unit.deploy.test_kubernetes import kubernetes_validate

DRA = REPO / "deploy" / "kubernetes" / "dra"
FILES = (
    "deviceclasses.yaml",
    "rbac.yaml",
    "daemonset.yaml",
    "gpu-claim.yaml",
    "mig-claim.yaml",
    "shared-claim.yaml",
)
FIRST_KUBERNETES = "1.34.0"  # resource.k8s.io/v1
NAMESPACE = "cdictk"  # cdictk-daemonset.yaml's
CLASS_CEL = re.compile(
    r"device\.driver == '(?P<driver>[^']+)' && device\.attributes\['(?P<domain>[^']+)'\]\.type == '(?P<type>[^']+)'"
)


def documents(name: str) -> list[dict[str, Any]]:
    with (DRA / name).open(encoding="utf-8") as handle:
        docs = [doc for doc in yaml.safe_load_all(handle) if doc is not None]
    assert all(isinstance(doc, dict) for doc in docs)
    return docs


def every_document() -> list[dict[str, Any]]:
    return [doc for name in FILES for doc in documents(name)]


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def kubernetes_versions() -> list[str]:
    try:
        latest: str = importlib.import_module("kubernetes_validate").latest_version()
    except ImportError:
        return [FIRST_KUBERNETES]
    return sorted({FIRST_KUBERNETES, latest})


def test_the_folder_holds_just_these_files() -> None:
    assert sorted(path.name for path in DRA.iterdir()) == sorted(FILES)


@pytest.mark.parametrize("version", kubernetes_versions())
def test_every_document_is_valid_kubernetes(version: str) -> None:
    validator = kubernetes_validate()
    docs = every_document()
    assert len(docs) == 13
    for doc in docs:
        validator.validate(doc, version, strict=True)


def test_the_device_classes_select_the_devices_the_plugin_publishes() -> None:
    classes = {doc["metadata"]["name"]: doc for doc in documents("deviceclasses.yaml")}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    for name, device_type in (("gpu.nvidia.com", GPU), ("mig.nvidia.com", MIG)):
        (selector,) = classes[name]["spec"]["selectors"]
        found = CLASS_CEL.fullmatch(selector["cel"]["expression"])
        assert found is not None
        # Unqualified attributes are in the driver's domain.
        assert found.groupdict() == {"driver": DRIVER, "domain": DRIVER, "type": device_type}


def pods_and_claims(name: str) -> tuple[list[dict[str, Any]], set[str]]:
    docs = documents(name)
    pods = kinds(docs, "Pod")
    claims = {
        doc["metadata"]["name"] for doc in docs if doc["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
    }
    return pods, claims


@pytest.mark.parametrize("name", ["gpu-claim.yaml", "mig-claim.yaml", "shared-claim.yaml"])
def test_each_pod_asks_for_claims_its_file_makes_of_classes_that_exist(name: str) -> None:
    classes = {doc["metadata"]["name"] for doc in documents("deviceclasses.yaml")}
    pods, claims = pods_and_claims(name)
    assert pods
    for pod in pods:
        spec = pod["spec"]
        by_pod = {claim["name"]: claim for claim in spec["resourceClaims"]}
        for source in by_pod.values():
            assert (source.get("resourceClaimName") or source.get("resourceClaimTemplateName")) in claims
        for container in spec["containers"]:
            assert {claim["name"] for claim in container["resources"]["claims"]} <= set(by_pod)
    for doc in documents(name):
        if doc["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
            spec = doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"]
            for request in spec["devices"]["requests"]:
                assert request["exactly"]["deviceClassName"] in classes


def test_the_mig_claim_asks_for_a_1g10gb_by_its_profile() -> None:
    (template,) = kinds(documents("mig-claim.yaml"), "ResourceClaimTemplate")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    (selector,) = request["exactly"]["selectors"]
    # "profile", in the driver's domain: the attribute cdictk.dra.nodedevices gives a MIG device.
    assert selector["cel"]["expression"] == f"device.attributes['{DRIVER}'].profile == '1g.10gb'"


def test_the_shared_claim_is_one_claim_named_by_two_pods() -> None:
    docs = documents("shared-claim.yaml")
    (claim,) = kinds(docs, "ResourceClaim")
    pods = kinds(docs, "Pod")
    assert len(pods) == 2 and len({pod["metadata"]["name"] for pod in pods}) == 2
    for pod in pods:
        (source,) = pod["spec"]["resourceClaims"]
        assert source == {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
    assert not kinds(docs, "ResourceClaimTemplate")  # a template would make a claim per pod


def test_the_plugin_may_do_what_it_needs_and_nothing_more() -> None:
    docs = documents("rbac.yaml")
    assert [doc["kind"] for doc in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    account, role, binding = docs
    assert account["metadata"] == {"name": "cdictk-dra-plugin", "namespace": NAMESPACE}
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        *(("resource.k8s.io", "resourceclaims", verb) for verb in ("get", "list", "watch")),
        *(
            ("resource.k8s.io", "resourceslices", verb)
            for verb in ("get", "list", "watch", "create", "update", "delete")
        ),
        ("", "nodes", "get"),
    }
    assert all(
        set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"]
    )  # no names, no URLs
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]


def test_the_service_accounts_namespace_is_the_daemonsets() -> None:
    path = Path(REPO / "deploy" / "kubernetes" / "cdictk-daemonset.yaml")
    namespaces = [
        doc["metadata"]["name"]
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc is not None and doc["kind"] == "Namespace"
    ]
    assert namespaces == [NAMESPACE]


def test_the_validation_catches_a_v1beta1_request_in_a_v1_claim() -> None:
    validator = kubernetes_validate()
    (template,) = kinds(documents("gpu-claim.yaml"), "ResourceClaimTemplate")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    request |= request.pop("exactly")  # v1beta1's flat request
    with pytest.raises(validator.ValidationError):
        validator.validate(template, FIRST_KUBERNETES, strict=True)


def the_plugin() -> tuple[dict[str, Any], dict[str, Any]]:
    """The DaemonSet's pod spec and its one container."""
    (daemonset,) = documents("daemonset.yaml")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_the_plugins_command_line_is_one_the_command_takes() -> None:
    _, container = the_plugin()
    command, *args = container["args"]
    assert command == "dra-plugin"
    context = dra_plugin_command.make_context("dra-plugin", list(args), resilient_parsing=True)
    assert context.params["host_root"] == "/host"
    assert context.params["driver_root"] == "/host$(DRIVER_ROOT)"
    assert context.params["hook_path"] == "$(RUNTIME_PREFIX)/current/bin/cdictk-hook"  # node-setup's


def test_the_plugin_runs_as_its_rbac_account_in_the_daemonsets_namespace_with_its_node_name() -> None:
    (daemonset,) = documents("daemonset.yaml")
    account = documents("rbac.yaml")[0]
    assert daemonset["metadata"]["namespace"] == NAMESPACE
    pod, container = the_plugin()
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", True)  # the client's in-cluster credentials
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
        "env"
    ]
    assert container["envFrom"] == [{"configMapRef": {"name": "cdictk"}}]  # DRIVER_ROOT and the rest


def test_the_plugin_serves_the_kubelets_paths_at_the_same_paths() -> None:
    pod, container = the_plugin()
    host_paths = {
        volume["name"]: volume["hostPath"]["path"] for volume in pod["volumes"] if "hostPath" in volume
    }
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    for path in ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"):
        assert host_paths[mounts[path]] == path, path
        assert not any(m.get("readOnly") for m in container["volumeMounts"] if m["mountPath"] == path)
    assert host_paths[mounts["/host"]] == "/"
