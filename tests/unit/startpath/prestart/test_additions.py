"""The prestart hook's plan: what the shim's edits add to a config that runc has already used."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from cdictk.startpath.prestart.additions import Additions, AdditionsError, additions_of
from cdictk.startpath.specs.apply import EditsSource, apply_edits

NULL = os.stat("/dev/null")
NULL_NODE = {
    "path": "/dev/null",
    "type": "c",
    "major": os.major(NULL.st_rdev),
    "minor": os.minor(NULL.st_rdev),
}
GPU0 = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 0o666}
GPU0_RULE = {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"}
LIBCUDA = {
    "destination": "/usr/lib/libcuda.so.1",
    "type": "bind",
    "source": "/usr/lib/libcuda.so.1",
    "options": ["ro", "nosuid", "nodev", "bind"],
}
LDCACHE = {"path": "/usr/bin/cdictk", "args": ["cdictk", "hook", "update-ldcache"]}


def base() -> dict[str, Any]:
    """A config as runc got it: one mount, runc's own device rule, a process with an environment."""
    return {
        "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"], "user": {"uid": 0, "gid": 0}},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }


def edited(change: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    original = base()
    copy_ = copy.deepcopy(original)
    change(copy_)
    return original, copy_


def test_added_nodes_rules_and_mounts_are_the_plan() -> None:
    def change(config: dict[str, Any]) -> None:
        config["linux"]["devices"] = [GPU0]
        config["linux"]["resources"]["devices"].append(GPU0_RULE)
        config["mounts"].append(LIBCUDA)

    original, after = edited(change)
    plan = additions_of(original, after)
    assert (plan.nodes, plan.rules, plan.mounts) == ([GPU0], [GPU0_RULE], [LIBCUDA])
    assert (plan.host_hooks, plan.container_hooks, plan.ignored) == ([], [], [])
    assert plan
    # The original's own entries (the proc mount, runc's deny-all rule) are not part of it.
    assert original["mounts"][0] not in plan.mounts


def test_only_what_is_new_is_planned_in_the_edited_order() -> None:
    first = {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}

    def change(config: dict[str, Any]) -> None:
        config["linux"]["devices"] = [GPU0, first]

    original, after = edited(change)
    original["linux"]["devices"] = [first]
    assert additions_of(original, after).nodes == [GPU0]


@pytest.mark.parametrize(
    ("stage", "where"),
    [("prestart", "host"), ("createRuntime", "host"), ("createContainer", "container")],
)
def test_hooks_go_where_their_stage_runs(stage: str, where: str) -> None:
    def change(config: dict[str, Any]) -> None:
        config["hooks"] = {stage: [LDCACHE]}

    plan = additions_of(*edited(change))
    assert plan
    assert plan.host_hooks == ([LDCACHE] if where == "host" else [])
    assert plan.container_hooks == ([LDCACHE] if where == "container" else [])


def test_a_hook_already_in_the_config_is_not_run_again() -> None:
    ours = {"path": "/usr/local/bin/nvidia-container-runtime-hook", "args": ["x", "prestart"]}

    def change(config: dict[str, Any]) -> None:
        config["hooks"]["prestart"].append(LDCACHE)

    original = base()
    original["hooks"] = {"prestart": [ours]}
    after = copy.deepcopy(original)
    change(after)
    assert additions_of(original, after).host_hooks == [LDCACHE]
    assert additions_of(original, copy.deepcopy(original)).host_hooks == []


@pytest.mark.parametrize("stage", ["startContainer", "poststart", "poststop"])
def test_a_hook_at_a_later_stage_cannot_be_planned(stage: str) -> None:
    def change(config: dict[str, Any]) -> None:
        config["hooks"] = {stage: [LDCACHE]}

    with pytest.raises(AdditionsError, match=f"a {stage} hook") as info:
        additions_of(*edited(change))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("allow", [False, None, "true"])
def test_a_rule_that_does_not_allow_is_refused(allow: Any) -> None:
    rule = dict(GPU0_RULE, allow=allow)

    def change(config: dict[str, Any]) -> None:
        config["linux"]["resources"]["devices"].append(rule)

    with pytest.raises(AdditionsError, match="denies"):
        additions_of(*edited(change))


def test_what_a_started_process_cannot_get_is_ignored_not_planned() -> None:
    def change(config: dict[str, Any]) -> None:
        config["process"]["env"].append("NVIDIA_DRIVER_CAPABILITIES=all")
        config["process"]["user"]["additionalGids"] = [44]
        config["linux"]["netDevices"] = {"eth1": {"name": "net1"}}
        config["linux"]["intelRdt"] = {"closID": "gpu"}

    plan = additions_of(*edited(change))
    assert not plan
    assert sorted(plan.ignored) == sorted(
        [
            "env NVIDIA_DRIVER_CAPABILITIES=all",
            "process.user.additionalGids",
            "linux.netDevices",
            "linux.intelRdt",
        ]
    )


def test_unchanged_env_and_linux_keys_are_not_reported() -> None:
    original = base()
    original["linux"]["intelRdt"] = {"closID": "x"}
    assert additions_of(original, copy.deepcopy(original)).ignored == []


def test_odd_shapes_in_the_original_count_as_empty() -> None:
    original: dict[str, Any] = {"linux": "nonsense", "mounts": {"not": "a list"}, "process": None}
    after: dict[str, Any] = {"linux": {"devices": [GPU0]}, "mounts": [LIBCUDA]}
    plan = additions_of(original, after)
    assert (plan.nodes, plan.mounts) == ([GPU0], [LIBCUDA])


SPEC_EDITS = {
    "env": ["NVIDIA_VISIBLE_DEVICES=void"],
    "deviceNodes": [{"path": "/dev/null"}],
    "mounts": [
        {"hostPath": "/etc/hostname", "containerPath": "/etc/host-name", "options": ["ro", "nosuid", "bind"]}
    ],
    "hooks": [
        {"hookName": "createContainer", "path": "/usr/bin/true", "args": ["true"]},
        {"hookName": "prestart", "path": "/usr/bin/true"},
    ],
}


def apply(config: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    apply_edits(out, [EditsSource(copy.deepcopy(SPEC_EDITS), "/etc/cdi/x.yaml", "containerEdits")], "c.json")
    return out


def test_the_shims_edits_become_the_plan() -> None:
    original = base()
    plan = additions_of(original, apply(original))
    assert [n["path"] for n in plan.nodes] == ["/dev/null"]
    assert (plan.nodes[0]["major"], plan.nodes[0]["minor"]) == (NULL_NODE["major"], NULL_NODE["minor"])
    assert plan.rules == [
        {
            "allow": True,
            "type": "c",
            "major": NULL_NODE["major"],
            "minor": NULL_NODE["minor"],
            "access": "rwm",
        }
    ]
    assert [m["destination"] for m in plan.mounts] == ["/etc/host-name"]
    assert plan.container_hooks == [{"path": "/usr/bin/true", "args": ["true"]}]
    assert plan.host_hooks == [{"path": "/usr/bin/true"}]
    assert plan.ignored == ["env NVIDIA_VISIBLE_DEVICES=void"]


def test_a_config_that_has_the_edits_already_gets_nothing_twice() -> None:
    """The shim (or an engine's CDI support) prepared the container: the hook adds nothing."""
    once = apply(base())
    twice = apply(once)
    plan = additions_of(once, twice)
    assert not plan
    assert (plan.nodes, plan.rules, plan.mounts, plan.host_hooks, plan.container_hooks) == ([],) * 5
    assert plan.ignored == []


def test_an_empty_plan_is_false_and_any_action_makes_it_true() -> None:
    assert not Additions()
    for field in ("nodes", "rules", "mounts", "host_hooks", "container_hooks"):
        plan = Additions()
        getattr(plan, field).append({})
        assert plan, field
    ignored_only = Additions()
    ignored_only.ignored.append("env X=1")
    assert not ignored_only
