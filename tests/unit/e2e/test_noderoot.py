"""The fake node's pieces that need no namespace: paths resolved as the node resolves them, the
Python check, and the configs containerd and the CNI read."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from tests.e2e.kubelet.images import PAUSE_IMAGE
from tests.e2e.noderoot import CNI_PLUGINS, NodeError, cni_config, containerd_config, has_python, resolve_in


def test_links_resolve_inside_the_node(tmp_path: Path) -> None:
    (tmp_path / "run" / "cdi").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    os.symlink("/run", tmp_path / "var" / "run")  # absolute: from the node's root, not this one's
    os.symlink("../run", tmp_path / "var" / "relative")
    assert resolve_in(tmp_path, "/var/run/cdi") == tmp_path / "run" / "cdi"
    assert resolve_in(tmp_path, "/var/relative/cdi/nvidia.yaml") == tmp_path / "run" / "cdi" / "nvidia.yaml"
    assert resolve_in(tmp_path, "/../../etc/./passwd") == tmp_path / "etc" / "passwd"
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(NodeError, match="too many links"):
        resolve_in(tmp_path, "/loop")


def test_has_python(tmp_path: Path) -> None:
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "sh").touch()
    assert has_python(tmp_path) == []
    (tmp_path / "usr" / "bin" / "python3.10").touch()
    assert has_python(tmp_path) == ["/usr/bin/python3.10"]


def test_containerd_and_cni_configs() -> None:
    config = tomllib.loads(containerd_config())
    assert config["version"] == 3
    plugins = config["plugins"]
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_IMAGE
    assert plugins["io.containerd.cri.v1.runtime"]["cni"]["bin_dirs"] == ["/opt/cni/bin"]
    network = json.loads(cni_config())
    used = {plugin["type"] for plugin in network["plugins"]} | {
        plugin["ipam"]["type"] for plugin in network["plugins"] if "ipam" in plugin
    }
    assert used <= set(CNI_PLUGINS)
