"""Placement as the scheduler and the DaemonSet controller decide it: node selector, required node
affinity (any term, every requirement), taints and tolerations."""

from __future__ import annotations

import dataclasses

import pytest

from tests import REPO
from tests.e2e.kubelet.manifest import Container, PodSpec, Requirement, Toleration, read_manifest
from tests.e2e.kubelet.scheduling import NodeInfo, Taint, matches, refusal, tolerates

MANIFEST = REPO / "deploy" / "kubernetes" / "cdictk-daemonset.yaml"
LABELS = {"a": "1", "n": "7"}


@pytest.mark.parametrize(
    ("operator", "values", "expected"),
    [
        ("In", ("1", "2"), True),
        ("In", ("2",), False),
        ("NotIn", ("2",), True),
        ("NotIn", ("1",), False),
        ("Exists", (), True),
        ("DoesNotExist", (), False),
        ("Gt", ("6",), True),
        ("Gt", ("7",), False),
        ("Lt", ("8",), True),
        ("Lt", ("x",), False),
    ],
)
def test_a_requirement_against_labels(operator: str, values: tuple[str, ...], expected: bool) -> None:
    key = "n" if operator in ("Gt", "Lt") else "a"
    assert matches(Requirement(key, operator, values), LABELS) is expected


def test_a_missing_label() -> None:
    assert not matches(Requirement("b", "In", ("1",)), LABELS)
    assert matches(Requirement("b", "NotIn", ("1",)), LABELS)
    assert matches(Requirement("b", "DoesNotExist"), LABELS)
    assert not matches(Requirement("b", "Gt", ("0",)), LABELS)


def test_tolerations() -> None:
    taint = Taint("nvidia.com/gpu", "present", "NoSchedule")
    assert tolerates(Toleration("nvidia.com/gpu", "Exists"), taint)
    assert tolerates(Toleration(operator="Exists"), taint)  # an empty key with Exists tolerates all
    assert tolerates(Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), taint)
    assert not tolerates(Toleration("nvidia.com/gpu", "Equal", "absent"), taint)
    assert not tolerates(Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"), taint)


def plain_pod(**changes: object) -> PodSpec:
    return dataclasses.replace(PodSpec((Container("c", "i"),)), **changes)  # type: ignore[arg-type]


def test_a_node_selector_and_an_affinity_term_without_requirements() -> None:
    node = NodeInfo("n", {"disk": "ssd"})
    assert refusal(plain_pod(node_selector={"disk": "ssd"}), node) is None
    assert "lacks the label disk=hdd" in str(refusal(plain_pod(node_selector={"disk": "hdd"}), node))
    assert "matches no term" in str(refusal(plain_pod(affinity_terms=((),)), node))


def test_the_daemon_set_lands_on_labelled_gpu_nodes_only() -> None:
    """Either NFD's PCI label or nvidia.com/gpu.present; the GPU taint tolerated; not elsewhere."""
    pod = read_manifest(MANIFEST.read_text(), MANIFEST.name).daemon_set().pod
    taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    for label in ("feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present"):
        assert refusal(pod, NodeInfo("gpu", {label: "true"}, taint), daemon_set=True) is None
    assert "matches no term" in str(
        refusal(pod, NodeInfo("cpu", {"kubernetes.io/os": "linux"}), daemon_set=True)
    )
    assert "matches no term" in str(
        refusal(pod, NodeInfo("gpu", {"nvidia.com/gpu.present": "false"}), daemon_set=True)
    )


def test_a_daemon_set_pod_tolerates_what_its_controller_adds() -> None:
    node = NodeInfo("n", taints=(Taint("node.kubernetes.io/not-ready", effect="NoExecute"),))
    assert refusal(plain_pod(), node, daemon_set=True) is None
    assert "node.kubernetes.io/not-ready=:NoExecute, not tolerated" in str(refusal(plain_pod(), node))
    network = NodeInfo("n", taints=(Taint("node.kubernetes.io/network-unavailable"),))
    assert refusal(plain_pod(host_network=True), network, daemon_set=True) is None
    assert refusal(plain_pod(), network, daemon_set=True) is not None
    assert refusal(plain_pod(), NodeInfo("n", taints=(Taint("x", effect="PreferNoSchedule"),))) is None
