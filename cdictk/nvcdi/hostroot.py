"""Host paths for a spec generated where the host's root is seen somewhere else (``--host-root``).

A DaemonSet sees the node's ``/`` at ``/host`` and generates with ``--driver-root /host``; every host
path it finds starts with ``/host``, but the runtime that reads the spec runs on the node, where the
same files are at ``/``. NVIDIA does this with a second command (``nvidia-ctk cdi transform root``);
here the generator writes the node's paths directly. Container paths never carry the prefix (they are
relative to the driver root already) and are left alone.
"""

from __future__ import annotations

from cdictk.cdi.model import Spec


def strip_host_root(spec: Spec, host_root: str) -> None:
    """Rewrite, in place, every host path under ``host_root`` as the node sees it."""
    prefix = host_root.rstrip("/")
    if not prefix:
        return

    def on_node(path: str) -> str:
        if path == prefix:
            return "/"
        return path[len(prefix) :] if path.startswith(prefix + "/") else path

    for edits in [spec.container_edits, *(device.container_edits for device in spec.devices)]:
        for node in edits.device_nodes:
            if node.host_path:
                node.host_path = on_node(node.host_path)
                if node.host_path == node.path:
                    node.host_path = ""  # the spec's own convention: no hostPath when it is the path
        for mount in edits.mounts:
            mount.host_path = on_node(mount.host_path)
        for hook in edits.hooks:
            hook.path = on_node(hook.path)
            hook.args = [on_node(arg) for arg in hook.args]
