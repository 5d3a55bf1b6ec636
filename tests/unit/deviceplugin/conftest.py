"""The device plugin running on a fake eight-GPU node, talking to the tests' kubelet stand-in."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdictk.deviceplugin.plugin import DevicePlugin
from cdictk.node.gpuhealth import HealthPolicy
from tests.conftest import NodeFactory
from tests.e2e.kubelet.kubelet import Kubelet
from tests.e2e.kubelet.nodeplugin import serve
from tests.fakenode.node import FakeNode

GPU = "nvidia.com/gpu"


@dataclass
class Running:
    node: FakeNode
    kubelet: Kubelet
    plugin: DevicePlugin
    spec_dir: Path
    lines: list[str]


PluginFactory = Callable[..., Running]


def generate_spec(node: FakeNode, spec_dir: Path) -> None:
    from cdictk.api import NodeSpecs
    from cdictk.cdi.dump import dump_yaml

    spec = NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys).spec()
    spec_dir.mkdir(exist_ok=True)
    (spec_dir / "nvidia.yaml").write_text(dump_yaml(spec))


@pytest.fixture
def run_plugin(make_node: NodeFactory, tmp_path: Path) -> Iterator[PluginFactory]:
    """``run_plugin(**settings)``: the eight-GPU node, its spec, a kubelet and the plugin serving;
    ``nvml_events=False``: on a node whose NVML has no event API."""
    started: list[tuple[threading.Event, threading.Thread, Kubelet]] = []
    # Unix socket paths are short (108 bytes): the plugin directory goes under /tmp.
    plugin_dir = tempfile.mkdtemp(prefix="cdictk-dp-", dir="/tmp")

    def start(preset: str = "eight", *, nvml_events: bool = True, **changes: object) -> Running:
        node = make_node(preset)
        if not nvml_events:
            node.write_nvml_config(dataclasses.replace(node.nvml_config(), events=False))
        spec_dir = tmp_path / "cdi"
        generate_spec(node, spec_dir)
        kubelet = Kubelet(plugin_dir)
        kubelet.start()
        lines: list[str] = []
        changes = {
            "rescan_interval": 0.2,
            "health": HealthPolicy(probe_interval=0.1, xid_recovery=1.0),
            **changes,
        }
        stop = threading.Event()
        plugin, thread = serve(kubelet, node, spec_dir, stop, log=lines.append, **changes)
        started.append((stop, thread, kubelet))
        return Running(node, kubelet, plugin, spec_dir, lines)

    yield start
    for stop, thread, kubelet in started:
        stop.set()
        thread.join(timeout=30)
        kubelet.stop()
    shutil.rmtree(plugin_dir, ignore_errors=True)
