"""``cdictk cdi transform root``: a spec's paths moved from one root to another.

A spec generated where the driver sits under one root (a driver container's ``/run/nvidia/driver``,
GKE's ``/home/kubernetes/bin/nvidia``) is read by a runtime that sees it under another. Relative to
the *host* (the default), what moves is what the runtime opens on the host: a device node's host
path (its container path when it has none), a mount's host path, the program of every hook but
``startContainer`` (which runs in the container), and the arguments of the hooks that run on the host
(``prestart``, ``createRuntime``, ``poststart``, ``poststop``). Relative to the *container*, what
moves is what the container sees: device and mount container paths and the arguments of
``createContainer`` and ``startContainer`` hooks. An argument ``a::b`` (a link and its target) moves
on both sides.

A path moves only when ``from`` is a whole-component prefix of it: ``/driver`` moves ``/driver`` and
``/driver/lib``, never ``/driver-backup``. The same transform as NVIDIA's ``nvidia-ctk cdi transform
root``, whose flags it takes.
"""

from __future__ import annotations

from cdictk.cdi.model import ContainerEdits, Spec

RELATIVE_TO = ("host", "container")
_IN_CONTAINER = ("createContainer", "startContainer")  # hooks whose arguments are container paths


def transform_root(spec: Spec, old: str, new: str, *, relative_to: str = "host") -> Spec:
    """``spec`` with the paths under ``old`` moved under ``new``, in place; ``spec`` itself."""
    if relative_to not in RELATIVE_TO:
        raise ValueError(f"relative_to must be one of {RELATIVE_TO}, not {relative_to!r}")
    if old == new:
        return spec
    edits = [spec.container_edits, *(device.container_edits for device in spec.devices)]
    for one in edits:
        (_host if relative_to == "host" else _container)(one, old, new)
    return spec


def moved(path: str, old: str, new: str) -> str:
    """``path`` under ``new`` when ``old`` is a whole-component prefix of it, else ``path``."""
    old, new = old.rstrip("/") or "/", new.rstrip("/") or "/"
    if path == old:
        return new
    prefix = old if old == "/" else old + "/"
    if not path.startswith(prefix):
        return path
    rest = path[len(prefix) :]
    if not rest:
        return new
    return new + rest if new == "/" else f"{new}/{rest}"


def _moved_arg(arg: str, old: str, new: str) -> str:
    return "::".join(moved(part, old, new) for part in arg.split("::"))


def _host(edits: ContainerEdits, old: str, new: str) -> None:
    for node in edits.device_nodes:
        source = node.host_path or node.path
        if moved(source, old, new) != source:
            node.host_path = moved(source, old, new)
    for mount in edits.mounts:
        mount.host_path = moved(mount.host_path, old, new)
    for hook in edits.hooks:
        if hook.hook_name != "startContainer":
            hook.path = moved(hook.path, old, new)
        if hook.hook_name not in _IN_CONTAINER:
            hook.args = [_moved_arg(arg, old, new) for arg in hook.args]


def _container(edits: ContainerEdits, old: str, new: str) -> None:
    for node in edits.device_nodes:
        if node.host_path == "" and moved(node.path, old, new) != node.path:
            node.host_path = node.path  # the host's node stays where it is
        node.path = moved(node.path, old, new)
    for mount in edits.mounts:
        mount.container_path = moved(mount.container_path, old, new)
    for hook in edits.hooks:
        if hook.hook_name in _IN_CONTAINER:
            hook.args = [_moved_arg(arg, old, new) for arg in hook.args]
