"""The reference library's validation rules: what makes a runtime refuse a spec.

Every problem is reported, each with its field path, rather than only the first. The JSON schema
(``schema.py``) adds stricter checks that runtimes do not make; these rules decide whether a spec's
devices can be listed and injected.
"""

from __future__ import annotations

from cdictk.cdi.model import ContainerEdits, Spec
from cdictk.cdi.version import version_problem
from cdictk.startpath.helpers.errors import Problem
from cdictk.startpath.specs.names import device_name_problem, kind_problem

HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
DEVICE_NODE_TYPES = ("", "b", "c", "u", "p")
_MAX_CLOS_ID = 4096


def check_spec(spec: Spec, file: str) -> list[Problem]:
    """Every rule ``spec`` breaks, as problems naming ``file`` and the field."""
    problems: list[tuple[str, str]] = []
    version = version_problem(spec)
    if version:
        problems.append(("cdiVersion", version))
    kind = kind_problem(spec.kind)
    if kind:
        problems.append(("kind", kind))
    _check_edits(spec.container_edits, "containerEdits", problems)
    if not spec.devices:
        problems.append(("devices", "the spec defines no devices"))
    first_index: dict[str, int] = {}
    for i, device in enumerate(spec.devices):
        path = f"devices[{i}]"
        name = device_name_problem(device.name)
        if name:
            problems.append((f"{path}.name", name))
        elif device.name in first_index:
            other = first_index[device.name]
            problems.append(
                (f"{path}.name", f'duplicate device name "{device.name}" (also devices[{other}])')
            )
        else:
            first_index[device.name] = i
        if device.container_edits.is_empty():
            problems.append(
                (f"{path}.containerEdits", "the device has no edits (a device needs at least one)")
            )
        _check_edits(device.container_edits, f"{path}.containerEdits", problems)
    return [Problem(file, field, reason) for field, reason in problems]


def env_problem(entry: str) -> str | None:
    if entry.find("=") <= 0:
        return f'invalid environment variable "{entry}" (want NAME=VALUE)'
    return None


def _check_env(env: list[str], path: str, problems: list[tuple[str, str]]) -> None:
    for i, entry in enumerate(env):
        problem = env_problem(entry)
        if problem:
            problems.append((f"{path}[{i}]", problem))


def _check_edits(edits: ContainerEdits, path: str, problems: list[tuple[str, str]]) -> None:
    _check_env(edits.env, f"{path}.env", problems)
    for i, node in enumerate(edits.device_nodes):
        where = f"{path}.deviceNodes[{i}]"
        if not node.path:
            problems.append((f"{where}.path", "empty device path"))
        if node.type not in DEVICE_NODE_TYPES:
            problems.append((f"{where}.type", f'invalid device type "{node.type}" (want b, c, u or p)'))
        if node.permissions.strip("rwm"):
            problems.append(
                (f"{where}.permissions", f'invalid permissions "{node.permissions}" (want letters of "rwm")')
            )
    for i, hook in enumerate(edits.hooks):
        where = f"{path}.hooks[{i}]"
        if hook.hook_name not in HOOK_NAMES:
            problems.append(
                (
                    f"{where}.hookName",
                    f'invalid hook name "{hook.hook_name}" (want one of {", ".join(HOOK_NAMES)})',
                )
            )
        if not hook.path:
            problems.append((f"{where}.path", "empty hook path"))
        _check_env(hook.env, f"{where}.env", problems)
    for i, mount in enumerate(edits.mounts):
        where = f"{path}.mounts[{i}]"
        if not mount.host_path:
            problems.append((f"{where}.hostPath", "empty mount host path"))
        if not mount.container_path:
            problems.append((f"{where}.containerPath", "empty mount container path"))
    if edits.intel_rdt is not None:
        clos_id = edits.intel_rdt.clos_id
        bad = len(clos_id) >= _MAX_CLOS_ID or clos_id in (".", "..") or "\n" in clos_id
        if bad or (clos_id != "/" and "/" in clos_id):
            problems.append((f"{path}.intelRdt.closID", f'invalid closID "{clos_id}"'))
    host_names: set[str] = set()
    names: set[str] = set()
    for i, net in enumerate(edits.net_devices):
        where = f"{path}.netDevices[{i}]"
        if not net.host_interface_name:
            problems.append((f"{where}.hostInterfaceName", "empty host interface name"))
        elif net.host_interface_name in host_names:
            problems.append(
                (f"{where}.hostInterfaceName", f'duplicate host interface "{net.host_interface_name}"')
            )
        if not net.name:
            problems.append((f"{where}.name", "empty interface name"))
        elif net.name in names:
            problems.append((f"{where}.name", f'duplicate interface name "{net.name}"'))
        host_names.add(net.host_interface_name)
        names.add(net.name)
