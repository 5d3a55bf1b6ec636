"""Apply CDI devices to an OCI runtime config (``config.json`` as a dict), as CDI-aware runtimes do.

What containerd, CRI-O and podman do with the reference library (v1.1.0), the same JSON for the same
spec and config: each spec's own edits once, before its first requested device; the merged edits applied
env -> device nodes -> net devices -> mounts -> hooks -> intelRdt -> additionalGids. Env entries are
appended, as the CDI specification says; the library keys the config's own entries by their whole text
and the edits' by their name, so an edit replaces an earlier edit of the same name, and a config entry
only when that entry is a bare name. Device nodes are filled in from an lstat of the host path, replace
an entry of the same path (at the end) and, for b and c nodes, append an allow rule to the device cgroup
(one per node, never a wildcard). Mounts replace the first mount of the same destination, then every
mount is sorted by depth, stably. Hooks are appended per stage, intelRdt replaced, additional gids added
once each (0 never). Unknown OCI fields are left as they are.

Two rules of our own (docs/compatibility.md, ``apply-failure`` and ``reapply``): every check and every
lstat happens before the config is touched, so a failure leaves it exactly as it was (the library may
have applied the env by then); and a config that holds every edit already, the same devices applied
before it (podman's precreate hook, then the shim; a CDI-aware engine, then the shim; ``cdictk cdi
inject`` twice), is left as it is, where the library would add the hooks, the cgroup rules and the env
entries again.

The engine reads container edits as the spec writes them (``{"env": [...], "deviceNodes": [...]}``,
a validated spec's ``containerEdits`` as plain data) rather than as model objects: the runtime shim
applies devices on every container start from the spec dirs' stored index, and
the model's dataclasses would cost it their imports. :class:`cdictk.startpath.specs.index.SpecIndex`
gives the edit blocks in the library's order. Standard library only, no :mod:`typing`.
"""

from __future__ import annotations

import os
import posixpath
import stat

from cdictk.startpath.helpers.errors import CdictkError

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


_HOST_TYPES = {stat.S_IFCHR: "c", stat.S_IFBLK: "b", stat.S_IFIFO: "p"}


class EditsSource:
    """A block of container edits (the spec's JSON shape) and where it came from, for error messages."""

    __slots__ = ("edits", "field", "file")

    def __init__(self, edits: dict[str, Any], file: str, field: str) -> None:
        self.edits = edits
        self.file = file
        self.field = field


def apply_edits(config: dict[str, Any], sources: Sequence[EditsSource], config_file: str) -> bool:
    """Apply edit blocks to ``config`` in place; False (and ``config`` as it was) when it holds every edit
    already. On CdictkError ``config`` is unchanged."""
    edits = _Edits(config, sources, config_file)
    if edits.present(config):
        return False
    edits.apply(config)
    return True


class _Edits:
    """The merged edits, checked against the config and completed from the host: applying cannot fail.
    Their entries are made for this config alone and go into it as they are."""

    __slots__ = ("env", "gids", "hooks", "mounts", "net_devices", "nodes", "rdt")

    def __init__(self, config: dict[str, Any], sources: Sequence[EditsSource], config_file: str) -> None:
        shape = _Shape(config, config_file)
        self.env = [entry for source in sources for entry in source.edits.get("env", ())]
        if self.env:
            shape.list_of(str, "process", "env")
        user = shape.mapping("process", "user")
        uid = _positive_int(user.get("uid")) if user is not None else None
        gid = _positive_int(user.get("gid")) if user is not None else None
        self.nodes = [
            _oci_node(node, uid, gid, source.file, f"{source.field}.deviceNodes[{i}]")
            for source in sources
            for i, node in enumerate(source.edits.get("deviceNodes", ()))
        ]
        if self.nodes:
            shape.list_of(dict, "linux", "devices")
            shape.list_of(dict, "linux", "resources", "devices")
        self.net_devices = [net for source in sources for net in source.edits.get("netDevices", ())]
        if self.net_devices:
            shape.mapping("linux", "netDevices")
        self.mounts = [_oci_mount(mount) for source in sources for mount in source.edits.get("mounts", ())]
        if self.mounts:
            for i, entry in enumerate(shape.list_of(dict, "mounts") or ()):
                # A mount without a destination is one at "" to the library, which goes on.
                if not isinstance(entry.get("destination", ""), str):
                    raise CdictkError(config_file, f"mounts[{i}].destination", "expected a string")
        self.hooks = [
            (hook["hookName"], _oci_hook(hook))
            for source in sources
            for hook in source.edits.get("hooks", ())
        ]
        for stage, _ in self.hooks:
            shape.list_of(dict, "hooks", stage)
        rdt = next(
            (s.edits["intelRdt"] for s in reversed(sources) if s.edits.get("intelRdt") is not None), None
        )
        self.rdt = None if rdt is None else _oci_intel_rdt(rdt)
        if self.rdt is not None or self.net_devices or self.nodes:
            shape.mapping("linux")
        self.gids = [
            value for source in sources for value in source.edits.get("additionalGids", ()) if value != 0
        ]
        if self.gids:
            shape.list_of(int, "process", "user", "additionalGids")

    def present(self, config: dict[str, Any]) -> bool:
        """Whether applying would only repeat what ``config`` holds: every node there, its path once
        (the library keeps one entry of a path, runc makes the first), every allow rule after the last
        deny, hook, net device, gid and intelRdt there, each variable's last value the edits' own, and
        the mounts as applying leaves them (it moves each to the end of its depth and sorts every mount
        by depth again). The shapes were checked; a fresh config fails at its first missing entry."""
        linux = config.get("linux") or {}
        if self.nodes:
            devices = linux.get("devices") or ()
            if any(node.device not in devices for node in self.nodes):
                return False
            paths = [device.get("path") for device in devices]
            if any(paths.count(node.device["path"]) != 1 for node in self.nodes):
                return False
            rules = (linux.get("resources") or {}).get("devices") or []
            denied = [i for i, rule in enumerate(rules) if rule.get("allow") is not True]
            allowed = rules[denied[-1] + 1 :] if denied else rules
            if any(node.access is not None and node.rule() not in allowed for node in self.nodes):
                return False
        hooks = config.get("hooks") or {}
        if any(hook not in (hooks.get(stage) or ()) for stage, hook in self.hooks):
            return False
        if self.env:
            process_env = (config.get("process") or {}).get("env") or ()
            last = {entry.partition("=")[0]: entry for entry in process_env}
            wanted = {entry.partition("=")[0]: entry for entry in self.env}
            if any(last.get(name) != entry for name, entry in wanted.items()):
                return False
        table = linux.get("netDevices") or {}
        if any(table.get(net["hostInterfaceName"]) != {"name": net["name"]} for net in self.net_devices):
            return False
        if self.rdt is not None and linux.get("intelRdt") != self.rdt:
            return False
        present = ((config.get("process") or {}).get("user") or {}).get("additionalGids") or ()
        if any(value not in present for value in self.gids):
            return False
        mounts = config.get("mounts") or []
        if not self.mounts:
            return True
        if self.mounts[0] not in mounts:
            return False
        again = mounts.copy()
        _add_mounts(again, self.mounts)
        return again == mounts

    def apply(self, config: dict[str, Any]) -> None:
        if self.env:
            _merge_env(_list_at(config, "process", "env"), self.env)
        for node in self.nodes:
            _add_node(config, node)
        if self.net_devices:
            table = _dict_at(config, "linux", "netDevices")
            for net in self.net_devices:
                table[net["hostInterfaceName"]] = {"name": net["name"]}
        if self.mounts:
            _add_mounts(_list_at(config, "mounts"), self.mounts)
        for stage, hook in self.hooks:
            _list_at(config, "hooks", stage).append(hook)
        if self.rdt is not None:
            _dict_at(config, "linux")["intelRdt"] = self.rdt
        if self.gids:
            present = _list_at(config, "process", "user", "additionalGids")
            for value in self.gids:
                if value not in present:
                    present.append(value)


class _Shape:
    """Checks that the parts of the config we are about to edit have the types the OCI spec gives them."""

    def __init__(self, config: dict[str, Any], file: str) -> None:
        self.config = config
        self.file = file

    def mapping(self, *keys: str) -> dict[str, Any] | None:
        value: Any = self.config
        for depth, key in enumerate(keys):
            value = value.get(key)
            if value is None:
                return None
            if not isinstance(value, dict):
                raise CdictkError(self.file, ".".join(keys[: depth + 1]), "expected an object")
        return value  # type: ignore[no-any-return]

    def list_of(self, item_type: type, *keys: str) -> list[Any] | None:
        parent = self.mapping(*keys[:-1])
        if parent is None:
            return None
        value = parent.get(keys[-1])
        if value is None:
            return None
        field = ".".join(keys)
        if not isinstance(value, list):
            raise CdictkError(self.file, field, "expected a list")
        for i, item in enumerate(value):
            if not isinstance(item, item_type) or isinstance(item, bool):
                raise CdictkError(self.file, f"{field}[{i}]", f"expected {_TYPE_WORDS[item_type]}")
        return value


_TYPE_WORDS = {str: "a string", dict: "an object", int: "an integer"}


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _dict_at(config: dict[str, Any], *keys: str) -> dict[str, Any]:
    node = config
    for key in keys:
        child = node.get(key)
        if child is None:
            # The Go library's empty Process serializes with a root user and an empty cwd.
            child = {"user": {"uid": 0, "gid": 0}, "cwd": ""} if node is config and key == "process" else {}
            node[key] = child
        node = child
    return node


def _list_at(config: dict[str, Any], *keys: str) -> list[Any]:
    parent = _dict_at(config, *keys[:-1])
    value: list[Any] | None = parent.get(keys[-1])
    if value is None:
        value = parent[keys[-1]] = []
    return value


def _merge_env(env: list[str], entries: list[str]) -> None:
    index = {entry: i for i, entry in enumerate(env)}  # the config's entries by their whole text
    for entry in entries:
        name = entry.partition("=")[0]
        at = index.get(name)
        if at is None:
            index[name] = len(env)
            env.append(entry)
        else:
            env[at] = entry


class _Node:
    """An OCI ``linux.devices`` entry and, for b and c nodes, the access its cgroup rule grants."""

    __slots__ = ("access", "device")

    def __init__(self, device: dict[str, Any], access: str | None) -> None:
        self.device = device
        self.access = access

    def rule(self) -> dict[str, Any]:
        device = self.device
        return {
            "allow": True,
            "type": device["type"],
            "major": device["major"],
            "minor": device["minor"],
            "access": self.access,
        }


def _host_device(path: str) -> tuple[str, os.stat_result] | str:
    """The host node's type and stat (lstat: a symlink is not a device), or why there is none."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f'cannot stat host device "{path}": {exc.strerror}'
    host_type = _HOST_TYPES.get(stat.S_IFMT(st.st_mode))
    if host_type is None:
        return f'host path "{path}" is not a device node'
    return host_type, st


def _oci_node(node: dict[str, Any], uid: int | None, gid: int | None, file: str, field: str) -> _Node:
    """``node`` completed from the host device, as the library does it.

    A node that already names its type and major (or is a FIFO) is "minimal": the host only supplies
    a missing fileMode, and a missing host node is no error.
    """
    path: str = node["path"]
    dev_type: str = node.get("type", "")
    major: int = node.get("major", 0)
    minor: int = node.get("minor", 0)
    file_mode: int | None = node.get("fileMode")
    minimal = dev_type != "" and (major != 0 or dev_type == "p")
    host_path = node.get("hostPath") or path
    found = _host_device(host_path)
    if isinstance(found, str):
        if not minimal:
            raise CdictkError(file, field, found)
    else:
        host_type, st = found
        if file_mode is None:
            file_mode = stat.S_IMODE(st.st_mode)
        if not minimal:
            if not dev_type:
                dev_type = host_type
            elif dev_type != host_type:
                raise CdictkError(
                    file,
                    field,
                    f'type "{dev_type}" does not match the host device "{host_path}" ("{host_type}")',
                )
            if dev_type != "p" and major == 0:
                major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    device: dict[str, Any] = {"path": path, "type": dev_type, "major": major, "minor": minor}
    if file_mode is not None:
        device["fileMode"] = file_mode
    owner = node.get("uid", uid)
    group = node.get("gid", gid)
    if owner is not None:
        device["uid"] = owner
    if group is not None:
        device["gid"] = group
    return _Node(device, (node.get("permissions") or "rwm") if dev_type in ("b", "c") else None)


def _add_node(config: dict[str, Any], node: _Node) -> None:
    device = node.device
    devices = _list_at(config, "linux", "devices")
    # The library removes the first entry of the node's path, then puts the node in place of a second
    # one (a config may list a path twice), else at the end.
    path = device["path"]
    same = (i for i, existing in enumerate(devices) if existing.get("path") == path)
    first, second = next(same, None), next(same, None)
    if second is None:
        devices.append(device)
    else:
        devices[second] = device
    if first is not None:
        del devices[first]
    if node.access is not None:
        _list_at(config, "linux", "resources", "devices").append(node.rule())


def _oci_mount(mount: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"destination": mount["containerPath"]}
    if mount.get("type"):
        entry["type"] = mount["type"]
    entry["source"] = mount["hostPath"]
    if mount.get("options"):
        entry["options"] = list(mount["options"])
    return entry


def _add_mounts(present: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> None:
    destinations = [existing.get("destination", "") for existing in present]
    for mount in mounts:
        destination = mount["destination"]
        if destination in destinations:
            i = destinations.index(destination)
            del present[i], destinations[i]
        present.append(mount)
        destinations.append(destination)
    # Parents before children: a mount must not be hidden by one made later on a parent directory.
    present.sort(key=_depth)


def _depth(mount: dict[str, Any]) -> int:
    """The library's depth of a mount: the slashes in its destination after Go's path.Clean."""
    cleaned = posixpath.normpath(mount.get("destination") or "")
    # normpath keeps a leading "//" (POSIX leaves it implementation-defined); Go's Clean does not.
    return cleaned.count("/") - cleaned.startswith("//")


def _oci_hook(hook: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": hook["path"]}
    if hook.get("args"):
        entry["args"] = list(hook["args"])
    if hook.get("env"):
        entry["env"] = list(hook["env"])
    if hook.get("timeout") is not None:
        entry["timeout"] = hook["timeout"]
    return entry


def _oci_intel_rdt(rdt: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if rdt.get("closID"):
        entry["closID"] = rdt["closID"]
    if rdt.get("schemata"):
        entry["schemata"] = list(rdt["schemata"])
    if rdt.get("l3CacheSchema"):
        entry["l3CacheSchema"] = rdt["l3CacheSchema"]
    if rdt.get("memBwSchema"):
        entry["memBwSchema"] = rdt["memBwSchema"]
    if rdt.get("enableMonitoring"):
        entry["enableMonitoring"] = True
    return entry
