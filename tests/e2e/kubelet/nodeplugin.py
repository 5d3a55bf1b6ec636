"""Our device plugin serving a fake node to the kubelet stand-in, in a thread of this process: what the
unit tests, the Kubernetes end-to-end tests and bench/k8s.py each start."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable

from cdictk.deviceplugin.plugin import DevicePlugin
from cdictk.deviceplugin.pluginsettings import Settings
from tests.e2e.kubelet.kubelet import Kubelet
from tests.fakenode.node import FakeNode


def serve(
    kubelet: Kubelet,
    node: FakeNode,
    spec_dir: str | os.PathLike[str],
    stop: threading.Event,
    *,
    log: Callable[[str], None] = lambda line: None,
    **changes: object,
) -> tuple[DevicePlugin, threading.Thread]:
    """The plugin for ``node`` (its roots, its spec in ``spec_dir``; ``changes`` put over those
    settings) registering with ``kubelet`` and serving until ``stop`` is set."""
    settings = Settings(
        plugin_dir=kubelet.plugin_dir,
        driver_root=node.root,
        proc_root=node.proc,
        sys_root=node.sys,
        spec_dirs=(os.fspath(spec_dir),),
    )
    plugin = DevicePlugin(dataclasses.replace(settings, **changes), log)  # type: ignore[arg-type]
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    return plugin, thread
