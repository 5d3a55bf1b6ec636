"""What a prestart hook must do to a running container: the shim's edits, as a list of actions.

The hook asks the same question the runtime shim does (:func:`cdictk.startpath.shim.inject.apply_requests`
on a copy of ``config.json``) and then takes the difference between the copy and the original: the
device nodes, device cgroup rules, mounts and hooks the shim would have added before ``runc create``.
runc has read ``config.json`` already, so the hook makes each of them itself, in the container.

Whatever is already in the original is left alone: a container the shim (or an engine's CDI support)
prepared gets nothing twice.
"""

from __future__ import annotations

from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The stages a prestart hook can still run a spec's hook at: before and in the container's mount
# namespace, with the rootfs not yet pivoted to. Later stages would need runc itself.
HOST_STAGES = ("prestart", "createRuntime")
CONTAINER_STAGES = ("createContainer",)


class AdditionsError(HookError):
    """The edits ask for something a prestart hook cannot do: one line."""


class Additions:
    """The additions, each in config.json's own shape (``linux.devices``, ``mounts``, ``hooks``)."""

    __slots__ = ("container_hooks", "host_hooks", "ignored", "mounts", "nodes", "rules")

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.rules: list[dict[str, Any]] = []  # linux.resources.devices entries, all "allow"
        self.mounts: list[dict[str, Any]] = []
        self.host_hooks: list[dict[str, Any]] = []
        self.container_hooks: list[dict[str, Any]] = []
        self.ignored: list[str] = []  # edits that cannot reach a started process, for the debug log

    def __bool__(self) -> bool:
        return bool(self.nodes or self.rules or self.mounts or self.host_hooks or self.container_hooks)


def additions_of(original: dict[str, Any], edited: dict[str, Any]) -> Additions:
    """The actions that turn the container ``original`` describes into the one ``edited`` describes."""
    plan = Additions()
    before = _linux(original)
    after = _linux(edited)
    plan.nodes = _added(_list(before, "devices"), _list(after, "devices"))
    old_rules = _list(before.get("resources") or {}, "devices")
    for rule in _added(old_rules, _list(after.get("resources") or {}, "devices")):
        if rule.get("allow") is not True:
            raise AdditionsError(
                f"a device cgroup rule that denies cannot be added by a prestart hook: {rule}"
            )
        plan.rules.append(rule)
    plan.mounts = _added(_list(original, "mounts"), _list(edited, "mounts"))
    old_hooks = original.get("hooks") or {}
    for stage, hooks in (edited.get("hooks") or {}).items():
        added = _added(old_hooks.get(stage) or [], hooks)
        if not added:
            continue
        if stage in HOST_STAGES:
            plan.host_hooks += added
        elif stage in CONTAINER_STAGES:
            plan.container_hooks += added
        else:
            raise AdditionsError(f"the spec asks for a {stage} hook, which a prestart hook cannot run")
    old_env = set(_list(original.get("process") or {}, "env"))
    plan.ignored += [
        f"env {entry}" for entry in _list(edited.get("process") or {}, "env") if entry not in old_env
    ]
    for key in ("netDevices", "intelRdt"):
        if after.get(key) != before.get(key):
            plan.ignored.append(f"linux.{key}")
    old_user = (original.get("process") or {}).get("user") or {}
    new_user = (edited.get("process") or {}).get("user") or {}
    if old_user.get("additionalGids") != new_user.get("additionalGids"):
        plan.ignored.append("process.user.additionalGids")
    return plan


def _linux(config: dict[str, Any]) -> dict[str, Any]:
    linux = config.get("linux")
    return linux if isinstance(linux, dict) else {}


def _list(mapping: dict[str, Any], key: str) -> list[Any]:
    value = mapping.get(key)
    return value if isinstance(value, list) else []


def _added(before: list[Any], after: list[Any]) -> list[Any]:
    """The entries of ``after`` that ``before`` lacks, in ``after``'s order."""
    return [entry for entry in after if entry not in before]
