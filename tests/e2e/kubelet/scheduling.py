"""Whether a pod lands on a node: its node selector, its required node affinity and its tolerations of
the node's taints, as the scheduler (and, for a DaemonSet, its controller) decides.

A DaemonSet's pods get the tolerations its controller adds to every pod it makes
(:data:`DAEMON_SET_TOLERATIONS`): a node that is not ready or under pressure keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.e2e.kubelet.manifest import PodSpec, Requirement, Toleration


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class NodeInfo:
    """What the API server knows of a node that placement reads."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


DAEMON_SET_TOLERATIONS = (
    Toleration("node.kubernetes.io/not-ready", "Exists", effect="NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", effect="NoExecute"),
    Toleration("node.kubernetes.io/disk-pressure", "Exists", effect="NoSchedule"),
    Toleration("node.kubernetes.io/memory-pressure", "Exists", effect="NoSchedule"),
    Toleration("node.kubernetes.io/pid-pressure", "Exists", effect="NoSchedule"),
    Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule"),
)
HOST_NETWORK_TOLERATION = Toleration("node.kubernetes.io/network-unavailable", "Exists", effect="NoSchedule")


def matches(requirement: Requirement, labels: dict[str, str]) -> bool:
    """One node selector requirement against a node's labels."""
    value = labels.get(requirement.key)
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    # Gt and Lt compare integers; a label that is none matches neither.
    if value is None or len(requirement.values) != 1:
        return False
    try:
        have, bound = int(value), int(requirement.values[0])
    except ValueError:
        return False
    return have > bound if operator == "Gt" else have < bound


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def refusal(pod: PodSpec, node: NodeInfo, *, daemon_set: bool = False) -> str | None:
    """Why ``pod`` would not land on ``node``; None when it would."""
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"node {node.name} lacks the label {key}={value} (nodeSelector)"
    # Any term may match, each of its requirements must; a term without any matches nothing.
    if pod.affinity_terms and not any(
        term and all(matches(r, node.labels) for r in term) for term in pod.affinity_terms
    ):
        return f"node {node.name} matches no term of the pod's required node affinity"
    tolerations = list(pod.tolerations)
    if daemon_set:
        tolerations += DAEMON_SET_TOLERATIONS
        if pod.host_network:
            tolerations.append(HOST_NETWORK_TOLERATION)
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in tolerations):
            return f"node {node.name} has the taint {taint.key}={taint.value}:{taint.effect}, not tolerated"
    return None
