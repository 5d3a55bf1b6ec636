"""What the kubelet stand-in's pod side works out without a node: QoS class, OOM score, CRI resources,
device requests, container logs and the ConfigMap volume's layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.kubelet.manifest import Container, KeyToPath, PodSpec, Resources
from tests.e2e.kubelet.pods import (
    PodError,
    extended_resources,
    linux_resources,
    oom_score_adj,
    qos_class,
    read_log,
    write_config_map,
)

MI = 1 << 20


def with_resources(requests: dict[str, float], limits: dict[str, float], **pod: object) -> PodSpec:
    container = Container("c", "i", resources=Resources(requests, limits))
    return PodSpec((container,), **pod)  # type: ignore[arg-type]


def test_qos_classes() -> None:
    assert qos_class(with_resources({}, {})) == "BestEffort"
    assert qos_class(with_resources({"cpu": 0.01, "memory": 64 * MI}, {"memory": 256 * MI})) == "Burstable"
    # Requests default to limits: limits alone on both make a Guaranteed pod.
    assert qos_class(with_resources({}, {"cpu": 1, "memory": 64 * MI})) == "Guaranteed"


def test_oom_scores() -> None:
    burstable = with_resources({"memory": 64 * MI}, {"memory": 256 * MI})
    container = burstable.containers[0]
    assert oom_score_adj(burstable, container, "Burstable") in range(3, 1000)
    critical = with_resources({"memory": 64 * MI}, {}, priority_class="system-node-critical")
    assert oom_score_adj(critical, critical.containers[0], "Burstable") == -997
    assert oom_score_adj(with_resources({}, {}), Container("c", "i"), "BestEffort") == 1000


def test_linux_resources_as_the_kubelet_sets_them() -> None:
    spec = with_resources({"cpu": 0.01, "memory": 64 * MI}, {"cpu": 0.5, "memory": 256 * MI})
    resources = linux_resources(spec, spec.containers[0], "Burstable")
    assert (resources.cpu_shares, resources.cpu_period, resources.cpu_quota) == (10, 100_000, 50_000)
    assert resources.memory_limit_in_bytes == 256 * MI
    none = linux_resources(with_resources({}, {}), Container("c", "i"), "BestEffort")
    assert (none.cpu_shares, none.cpu_quota, none.memory_limit_in_bytes) == (2, 0, 0)


def test_extended_resources_are_the_device_plugins() -> None:
    container = Container("c", "i", resources=Resources({}, {"nvidia.com/gpu": 2, "memory": MI, "cpu": 1}))
    assert extended_resources(container) == {"nvidia.com/gpu": 2}
    half = Container("c", "i", resources=Resources({}, {"nvidia.com/gpu": 0.5}))
    with pytest.raises(PodError, match="whole number"):
        extended_resources(half)


def test_a_container_log_in_the_cri_format(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text(
        "2026-01-01T00:00:00.1Z stdout F one\n"
        "2026-01-01T00:00:00.2Z stderr P two \n"
        "2026-01-01T00:00:00.3Z stderr F halves\n"
    )
    assert read_log(log) == "one\ntwo halves\n"
    assert read_log(tmp_path / "missing.log") == ""


def test_a_config_map_volume_as_the_atomic_writer_lays_it_out(tmp_path: Path) -> None:
    write_config_map(tmp_path, {"config.yaml": "a: 1\n", "other": "x"}, (), 0o644)
    data = os.readlink(tmp_path / "..data")
    assert data.startswith("..") and (tmp_path / data).is_dir()
    assert os.readlink(tmp_path / "config.yaml") == "..data/config.yaml"
    assert (tmp_path / "config.yaml").read_text() == "a: 1\n"
    assert (tmp_path / data / "other").stat().st_mode & 0o777 == 0o644
    items = tmp_path / "items"
    write_config_map(items, {"k": "v", "unused": "u"}, (KeyToPath("k", "sub/file", 0o600),), 0o644)
    assert sorted(p.name for p in items.iterdir() if not p.name.startswith("..")) == ["sub"]
    assert (items / "sub" / "file").read_text() == "v"
    assert (items / "sub" / "file").stat().st_mode & 0o777 == 0o600
