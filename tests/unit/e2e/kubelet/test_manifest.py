"""The kubelet stand-in's reading of manifests: the real DaemonSet in full, and every key it would not
act on as the kubelet does is an error that names where it is."""

from __future__ import annotations

import textwrap

import pytest

from tests import REPO
from tests.e2e.kubelet.manifest import (
    ConfigMapSource,
    EmptyDirSource,
    HostPathSource,
    ManifestError,
    quantity,
    read_manifest,
)

MANIFEST = REPO / "deploy" / "kubernetes" / "cdictk-daemonset.yaml"


def pod(spec: str, *, kind: str = "Pod", extra: str = "") -> str:
    """A manifest of one pod (or a DaemonSet around it) with ``spec`` as its pod spec."""
    body = textwrap.indent(textwrap.dedent(spec).strip(), "    " if kind == "Pod" else "        ")
    if kind == "Pod":
        return f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{body}\n{extra}"
    return (
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d}\nspec:\n"
        "  selector: {matchLabels: {app: d}}\n  template:\n    metadata: {labels: {app: d}}\n"
        f"    spec:\n{textwrap.indent(body, '  ')}\n{extra}"
    )


MINIMAL = """
automountServiceAccountToken: false
containers:
  - {name: c, image: i}
"""


def error(text: str) -> str:
    with pytest.raises(ManifestError) as raised:
        read_manifest(text, "m")
    return str(raised.value)


def test_the_daemonset_manifest_reads_whole() -> None:
    manifest = read_manifest(MANIFEST.read_text(), MANIFEST.name)
    daemon_set = manifest.daemon_set()
    namespace = daemon_set.meta.namespace
    assert namespace in manifest.namespaces
    assert (namespace, daemon_set.pod.service_account) in manifest.service_accounts
    pod = daemon_set.pod
    assert pod.init_containers and pod.containers and pod.privileged
    volumes = {v.name: v.source for v in pod.volumes}
    assert isinstance(volumes["host-root"], HostPathSource) and volumes["host-root"].path == "/"
    assert any(isinstance(s, ConfigMapSource) for s in volumes.values())
    assert any(isinstance(s, EmptyDirSource) and s.medium == "Memory" for s in volumes.values())
    for container in (*pod.init_containers, *pod.containers):
        for ref in container.env_from:
            assert manifest.config_map(namespace, ref.config_map) is not None
        assert {m.name for m in container.mounts} <= set(volumes)


def test_a_minimal_pod_reads() -> None:
    spec = read_manifest(pod(MINIMAL), "m").pods[("default", "p")].spec
    assert [c.name for c in spec.containers] == ["c"]
    assert spec.restart_policy == "Always" and spec.termination_grace == 30


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        (MINIMAL + "hostUsers: false\n", "spec.hostUsers: not understood"),
        (MINIMAL.replace("{name: c, image: i}", "{name: c, image: i, ports: [{containerPort: 1}]}"),
         "spec.containers[0].ports: not understood"),
        (MINIMAL + "securityContext: {runAsUser: 1}\n", "spec.securityContext: not understood"),
        (MINIMAL.replace("image: i}", "image: i, securityContext: {capabilities: {add: [X], keep: [Y]}}}"),
         "spec.containers[0].securityContext.capabilities.keep: not understood"),
    ],
)  # fmt: skip
def test_what_the_stand_in_does_not_do_is_an_error_naming_its_path(spec: str, where: str) -> None:
    assert f"m: Pod default/p: {where} by the kubelet stand-in" in error(pod(spec))


def test_an_unknown_kind_or_api_version_is_an_error() -> None:
    assert "Service: a kind the kubelet stand-in does not know" in error(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
    )
    assert "'apps/v1', want 'v1' for a ConfigMap" in error(
        "apiVersion: apps/v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    )


def test_a_wrong_type_is_an_error() -> None:
    assert "spec.hostPID: want bool, got 'yes'" in error(pod(MINIMAL + "hostPID: 'yes'\n"))
    assert "spec.terminationGracePeriodSeconds: want int, got True" in error(
        pod(MINIMAL + "terminationGracePeriodSeconds: true\n")
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10m", 0.01),
        ("1", 1.0),
        ("0.5", 0.5),
        ("64Mi", 64 << 20),
        ("1Gi", 1 << 30),
        ("1G", 1e9),
        ("16k", 16e3),
    ],
)
def test_quantities(text: str, value: float) -> None:
    assert quantity(text) == value


def test_a_bad_quantity_is_an_error() -> None:
    assert "resources.limits.memory: 'lots' is not a quantity" in error(
        pod(MINIMAL.replace("image: i}", "image: i, resources: {limits: {memory: lots}}}"))
    )


def test_probes_are_exec_only() -> None:
    spec = MINIMAL.replace("image: i}", "image: i, readinessProbe: {httpGet: {port: 80}}}")
    assert "only exec probes are run by the stand-in" in error(pod(spec))
    spec = MINIMAL.replace(
        "image: i}", "image: i, livenessProbe: {exec: {command: [ready]}, periodSeconds: 7}}"
    )
    probe = read_manifest(pod(spec), "m").pods[("default", "p")].spec.containers[0].liveness
    assert probe is not None and probe.command == ("ready",) and probe.period == 7 and probe.timeout == 1


def test_volumes_are_checked() -> None:
    host = MINIMAL + "volumes: [{name: v, hostPath: {path: /x, type: Folder}}]\n"
    assert "hostPath.type: 'Folder' is not one of" in error(pod(host))
    relative = MINIMAL + "volumes: [{name: v, hostPath: {path: x}}]\n"
    assert "hostPath.path: 'x' is not absolute" in error(pod(relative))
    two = MINIMAL + "volumes: [{name: v, hostPath: {path: /x}, emptyDir: {}}]\n"
    assert "want one of hostPath, configMap or emptyDir, got 2" in error(pod(two))
    unknown = MINIMAL.replace("image: i}", "image: i, volumeMounts: [{name: w, mountPath: /w}]}")
    assert "mounts w, no such volume" in error(pod(unknown))
    memory = MINIMAL + "volumes: [{name: v, emptyDir: {medium: Memory, sizeLimit: 16Mi}}]\n"
    (volume,) = read_manifest(pod(memory), "m").pods[("default", "p")].spec.volumes
    assert volume.source == EmptyDirSource("Memory", 16 << 20)


def test_bidirectional_propagation_needs_a_privileged_container() -> None:
    spec = (
        MINIMAL.replace(
            "image: i}",
            "image: i, volumeMounts: [{name: v, mountPath: /v, mountPropagation: Bidirectional}]}",
        )
        + "volumes: [{name: v, hostPath: {path: /v}}]\n"
    )
    assert "Bidirectional needs privileged" in error(pod(spec))


def test_a_config_map_the_pod_names_must_be_in_the_manifest_unless_optional() -> None:
    spec = MINIMAL.replace("image: i}", "image: i, envFrom: [{configMapRef: {name: settings}}]}")
    assert "ConfigMap settings is not in the manifest" in error(pod(spec))
    optional = spec.replace("name: settings}", "name: settings, optional: true}")
    assert read_manifest(pod(optional), "m").pods


def test_a_pod_that_would_get_a_token_is_an_error() -> None:
    spec = MINIMAL.replace("automountServiceAccountToken: false\n", "")
    assert "would get a ServiceAccount token" in error(pod(spec))


def test_env_value_from_wants_exactly_one_source() -> None:
    both = MINIMAL.replace(
        "image: i}",
        "image: i, env: [{name: A, valueFrom: {fieldRef: {fieldPath: spec.nodeName}, "
        "configMapKeyRef: {name: c, key: k}}}]}",
    )
    assert "want one of configMapKeyRef or fieldRef" in error(pod(both))
    unknown = MINIMAL.replace(
        "image: i}", "image: i, env: [{name: A, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]}"
    )
    assert "'status.podIP' is not one of" in error(pod(unknown))


def test_a_daemon_set_restarts_its_pods_always_and_its_selector_matches_its_template() -> None:
    assert "spec.template.spec.restartPolicy: 'Never' is not one of 'Always'" in error(
        pod(MINIMAL + "restartPolicy: Never\n", kind="DaemonSet")
    )
    assert read_manifest(pod(MINIMAL + "restartPolicy: Never\n"), "m").pods
    mismatched = pod(MINIMAL, kind="DaemonSet").replace("labels: {app: d}", "labels: {app: other}")
    assert "spec.selector: does not match the template's labels" in error(mismatched)


def test_an_init_container_may_have_no_probe() -> None:
    spec = MINIMAL + "initContainers:\n  - {name: i, image: i, readinessProbe: {exec: {command: [ready]}}}\n"
    assert "init container i has a probe" in error(pod(spec))


def test_the_update_strategy_is_read() -> None:
    text = pod(MINIMAL, kind="DaemonSet").replace(
        "  selector:",
        "  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1, maxSurge: 25%}}\n  selector:",
    )
    daemon_set = read_manifest(text, "m").daemon_set()
    assert (daemon_set.max_unavailable, daemon_set.max_surge) == (1, "25%")
    on_delete = text.replace("type: RollingUpdate", "type: OnDelete")
    assert "updateStrategy.type: 'OnDelete' is not one of 'RollingUpdate'" in error(on_delete)
