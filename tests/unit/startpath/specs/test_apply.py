"""Each step of applying CDI edits to an OCI config (cdi.md §4); /dev/null (c 1:3) is the host node."""

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdictk.cdi.scan import spec_data
from cdictk.entrypoints.slowpath import scan_specs
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.apply import EditsSource, apply_edits
from cdictk.startpath.specs.index import SpecIndex

NULL_MODE = os.stat("/dev/null").st_mode & 0o7777

# A device as the spec dirs' index resolves it: its spec, the spec's file, its qualified name.
Registered = tuple[Spec, str, str]


def registered(spec: Spec, path: str = "/etc/cdi/spec.yaml") -> list[Registered]:
    return [(spec, path, f"{spec.kind}={device.name}") for device in spec.devices]


def edits_for(devices: list[Registered]) -> list[EditsSource]:
    """The edit blocks the index gives for ``devices``, in the library's order."""
    index = SpecIndex.load([], scan_specs)
    added: list[tuple[int, str]] = []
    for spec, path, _ in devices:
        if (id(spec), path) not in added:
            added.append((id(spec), path))
            index = index.with_spec_data(spec_data(spec), path)
    return index.resolve([name for _, _, name in devices])


def inject_devices(config: dict[str, Any], devices: list[Registered], config_file: str) -> None:
    apply_edits(config, edits_for(devices), config_file)


def one(edits: ContainerEdits, common: ContainerEdits | None = None) -> list[Registered]:
    spec = Spec(
        "0.7.0",
        "v.com/c",
        devices=[Device("d", container_edits=edits)],
        container_edits=common or ContainerEdits(),
    )
    return registered(spec)


def apply(
    config: dict[str, Any], edits: ContainerEdits, common: ContainerEdits | None = None
) -> dict[str, Any]:
    inject_devices(config, one(edits, common), "config.json")
    return config


def base() -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/bin", "TERM=xterm"],
            "cwd": "/",
        },
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
        "annotations": {"x.example/unknown": "kept"},
        "vendorExtension": {"kept": True},
    }


def test_spec_edits_once_per_spec_before_its_first_device() -> None:
    spec_a = Spec("0.3.0", "a.com/c", container_edits=ContainerEdits(env=["A_COMMON=1"]), devices=[
        Device("a1", container_edits=ContainerEdits(env=["A1=1"])),
        Device("a2", container_edits=ContainerEdits(env=["A2=1"])),
    ])  # fmt: skip
    spec_b = Spec("0.3.0", "b.com/c", container_edits=ContainerEdits(env=["B_COMMON=1"]), devices=[
        Device("b1", container_edits=ContainerEdits(env=["B1=1"])),
    ])  # fmt: skip
    a1, a2 = registered(spec_a, "/a.yaml")
    (b1,) = registered(spec_b, "/b.yaml")
    config: dict[str, Any] = {"process": {"env": []}}
    inject_devices(config, [a1, b1, a2, a1], "config.json")
    assert config["process"]["env"] == ["A_COMMON=1", "A1=1", "B_COMMON=1", "B1=1", "A2=1"]
    assert [s.field for s in edits_for([a1, b1, a2, a1])] == [
        "containerEdits", "devices[0].containerEdits", "containerEdits", "devices[0].containerEdits", "devices[1].containerEdits",
    ]  # fmt: skip


def test_env_appended_as_the_library_appends_it() -> None:
    # The library keys the config's entries by their whole text, the edits' by their name: an edit
    # replaces an earlier edit of its name, and of the config's entries only a bare name.
    config = {"process": {"env": ["PATH=/bin", "TERM=xterm", "DUP=1", "DUP=2", "BARE"]}}
    apply(config, ContainerEdits(env=["TERM=dumb", "NEW=1", "NEW=2", "DUP=3", "EMPTY=", "BARE=1"]))
    assert config["process"]["env"] == [
        "PATH=/bin", "TERM=xterm", "DUP=1", "DUP=2", "BARE=1", "TERM=dumb", "NEW=2", "DUP=3", "EMPTY=",
    ]  # fmt: skip


def test_an_entry_the_config_has_already_is_added_again() -> None:
    config = {"process": {"env": ["A=1", "B=2"]}}
    apply(config, ContainerEdits(env=["A=1", "C=3"]))
    assert config["process"]["env"] == ["A=1", "B=2", "A=1", "C=3"]


def test_device_node_filled_in_from_the_host() -> None:
    config = apply(base(), ContainerEdits(device_nodes=[DeviceNode(path="/dev/gpu", host_path="/dev/null")]))
    assert config["linux"]["devices"] == [
        {"path": "/dev/gpu", "type": "c", "major": 1, "minor": 3, "fileMode": NULL_MODE}
    ]
    assert config["linux"]["resources"]["devices"] == [
        {"allow": False, "access": "rwm"},
        {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
    ]


def test_host_path_defaults_to_path() -> None:
    config = apply({}, ContainerEdits(device_nodes=[DeviceNode(path="/dev/null", permissions="rw")]))
    assert config["linux"]["devices"][0]["major"] == 1
    assert config["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rw"}
    ]


def test_minimal_node_needs_no_host_node() -> None:
    node = DeviceNode(path="/dev/nvidia0", host_path="/nonexistent/nvidia0", type="c", major=195)
    config = apply({}, ContainerEdits(device_nodes=[node]))
    assert config["linux"]["devices"] == [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]
    assert config["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"}
    ]


def test_minimal_node_takes_only_the_mode_from_the_host() -> None:
    node = DeviceNode(path="/dev/x", host_path="/dev/null", type="c", major=195, minor=7)
    assert apply({}, ContainerEdits(device_nodes=[node]))["linux"]["devices"] == [
        {"path": "/dev/x", "type": "c", "major": 195, "minor": 7, "fileMode": NULL_MODE}
    ]


def test_zero_major_takes_major_and_minor_from_the_host() -> None:
    node = DeviceNode(path="/dev/x", host_path="/dev/null", type="c", minor=7, file_mode=0o600, uid=5, gid=6)
    assert apply({}, ContainerEdits(device_nodes=[node]))["linux"]["devices"] == [
        {"path": "/dev/x", "type": "c", "major": 1, "minor": 3, "fileMode": 0o600, "uid": 5, "gid": 6}
    ]


def test_fifo_gets_no_cgroup_rule(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo", 0o640)
    config = apply(
        {}, ContainerEdits(device_nodes=[DeviceNode(path="/dev/pipe", host_path=str(tmp_path / "fifo"))])
    )
    assert config["linux"]["devices"] == [
        {"path": "/dev/pipe", "type": "p", "major": 0, "minor": 0, "fileMode": 0o640}
    ]
    assert "resources" not in config["linux"]


def test_no_rule_is_ever_a_wildcard() -> None:
    nodes = [DeviceNode(path=f"/dev/n{i}", host_path="/dev/null") for i in range(3)]
    config = apply(base(), ContainerEdits(device_nodes=nodes))
    for rule in config["linux"]["resources"]["devices"][1:]:
        assert rule["allow"] is True and rule["type"] == "c" and rule["major"] == 1 and rule["minor"] == 3


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        (
            DeviceNode(path="/dev/x", host_path="/nonexistent"),
            'cannot stat host device "/nonexistent": No such file or directory',
        ),
        (
            DeviceNode(path="/dev/x", host_path="/etc/hostname"),
            'host path "/etc/hostname" is not a device node',
        ),
        (
            DeviceNode(path="/dev/x", host_path="/dev/null", type="b"),
            'type "b" does not match the host device "/dev/null" ("c")',
        ),
        (
            DeviceNode(path="/dev/x", host_path="/dev/null", type="u"),
            'type "u" does not match the host device "/dev/null" ("c")',
        ),
    ],
)
def test_node_errors_leave_the_config_untouched(node: DeviceNode, reason: str) -> None:
    config = base()
    before = copy.deepcopy(config)
    devices = one(
        ContainerEdits(env=["A=1"], device_nodes=[DeviceNode(path="/dev/ok", host_path="/dev/null"), node])
    )
    with pytest.raises(CdictkError) as caught:
        inject_devices(config, devices, "config.json")
    assert str(caught.value) == f"/etc/cdi/spec.yaml: devices[0].containerEdits.deviceNodes[1]: {reason}"
    assert config == before


def test_host_symlink_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/dev/null")
    with pytest.raises(CdictkError, match="is not a device node"):
        apply({}, ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path=str(tmp_path / "link"))]))


def test_owner_defaults_to_the_process_user() -> None:
    config = base()
    config["process"]["user"] = {"uid": 1000, "gid": 0}
    nodes = [
        DeviceNode(path="/dev/a", host_path="/dev/null"),
        DeviceNode(path="/dev/b", host_path="/dev/null", uid=7),
    ]
    devices = apply(config, ContainerEdits(device_nodes=nodes))["linux"]["devices"]
    assert (devices[0]["uid"], "gid" in devices[0]) == (1000, False)
    assert devices[1]["uid"] == 7


def test_same_path_replaces_the_existing_device() -> None:
    config = base()
    config["linux"]["devices"] = [
        {"path": "/dev/x", "type": "c", "major": 9, "minor": 9},
        {"path": "/dev/y", "type": "c", "major": 8, "minor": 8},
    ]
    devices = apply(config, ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]))[
        "linux"
    ]["devices"]
    assert [(d["path"], d["major"]) for d in devices] == [("/dev/y", 8), ("/dev/x", 1)]


def test_a_path_the_config_lists_twice_keeps_one_entry_in_the_second_place() -> None:
    # The library removes the first entry of the path, then replaces the next one where it is.
    config = base()
    config["linux"]["devices"] = [
        {"path": "/dev/x", "type": "c", "major": 9, "minor": 9},
        {"path": "/dev/y", "type": "c", "major": 8, "minor": 8},
        {"path": "/dev/x", "type": "c", "major": 7, "minor": 7},
        {"path": "/dev/z", "type": "c", "major": 6, "minor": 6},
    ]
    devices = apply(config, ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]))[
        "linux"
    ]["devices"]
    assert [(d["path"], d["major"]) for d in devices] == [("/dev/y", 8), ("/dev/x", 1), ("/dev/z", 6)]


def test_a_mount_without_a_destination_is_one_at_the_empty_path() -> None:
    config = base()
    config["mounts"] = [{"destination": "/a/b", "source": "/ab"}, {"source": "/nowhere"}]
    mounts = apply(config, ContainerEdits(mounts=[Mount("/h", "/c")]))["mounts"]
    assert mounts == [
        {"source": "/nowhere"}, {"destination": "/c", "source": "/h"}, {"destination": "/a/b", "source": "/ab"},
    ]  # fmt: skip


def test_applying_twice_changes_nothing() -> None:
    edits = ContainerEdits(
        env=["A=1"],
        device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")],
        mounts=[Mount("/h", "/c", ["ro", "rbind"])],
        hooks=[Hook("createContainer", "/bin/hook", ["hook", "x"], ["E=1"])],
        additional_gids=[44],
        net_devices=[NetDevice("eth1", "n1")],
        intel_rdt=IntelRdt(clos_id="c"),
    )
    once = apply(base(), edits, common=ContainerEdits(env=["C=1"]))
    twice = apply(copy.deepcopy(once), edits, common=ContainerEdits(env=["C=1"]))
    assert twice == once
    assert len(once["linux"]["resources"]["devices"]) == 2
    assert len(once["hooks"]["createContainer"]) == 1


def test_an_allow_rule_is_appended_after_a_later_deny() -> None:
    config = base()
    allow = {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
    deny = {"allow": False, "access": "rwm"}
    config["linux"]["resources"]["devices"] = [allow, deny]
    apply(config, ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]))
    assert config["linux"]["resources"]["devices"] == [allow, deny, allow]


def test_identical_hooks_and_rules_of_two_devices_are_both_added() -> None:
    hook = Hook("createContainer", "/bin/hook", ["hook"])
    spec = Spec("0.3.0", "v.com/c", devices=[
        Device("a", container_edits=ContainerEdits(hooks=[hook], device_nodes=[DeviceNode("/dev/a", "/dev/null")])),
        Device("b", container_edits=ContainerEdits(hooks=[hook], device_nodes=[DeviceNode("/dev/b", "/dev/null")])),
    ])  # fmt: skip
    config = base()
    inject_devices(config, registered(spec), "config.json")
    assert config["hooks"]["createContainer"] == [{"path": "/bin/hook", "args": ["hook"]}] * 2
    assert (
        config["linux"]["resources"]["devices"][1:]
        == [{"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}] * 2
    )


def test_a_config_holding_some_of_the_edits_gets_them_again() -> None:
    config = base()
    config["hooks"] = {"createContainer": [{"path": "/bin/h"}]}
    apply(config, ContainerEdits(hooks=[Hook("createContainer", "/bin/h")], env=["A=1"]))
    assert config["hooks"]["createContainer"] == [{"path": "/bin/h"}] * 2


def test_a_config_holding_every_edit_is_left_as_it_is() -> None:
    # The library would add the hook, the env entry and the allow rule again: the corpus's `reapply`
    # cases hold that side (tests/unit/cdi/test_reference_corpus.py).
    edits = ContainerEdits(
        env=["A=1"],
        device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")],
        hooks=[Hook("createContainer", "/bin/h")],
    )
    once = apply(base(), edits)
    twice = copy.deepcopy(once)
    assert apply_edits(twice, edits_for(one(edits)), "config.json") is False
    assert twice == once


def test_a_deny_after_the_allow_rule_means_not_applied_yet() -> None:
    edits = ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")])
    once = apply(base(), edits)
    once["linux"]["resources"]["devices"].append({"allow": False, "access": "rwm"})
    twice = apply(copy.deepcopy(once), edits)
    assert twice["linux"]["resources"]["devices"][-1] == {
        "allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm",
    }  # fmt: skip


def test_a_variable_whose_last_value_differs_means_not_applied_yet() -> None:
    once = apply(base(), ContainerEdits(env=["A=1"]))
    once["process"]["env"].append("A=2")
    assert apply(copy.deepcopy(once), ContainerEdits(env=["A=1"]))["process"]["env"][-1] == "A=1"


def test_a_path_listed_twice_means_not_applied_yet() -> None:
    # runc makes the first entry of a path: a decoy before the spec's node would win; the library keeps
    # one entry, the spec's.
    edits = ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")])
    once = apply(base(), edits)
    node = once["linux"]["devices"][0]
    once["linux"]["devices"].insert(0, {**node, "minor": 5})
    twice = apply(copy.deepcopy(once), edits)
    assert twice["linux"]["devices"] == [node]
    assert twice["linux"]["resources"]["devices"][-1]["minor"] == 3
    assert len(twice["linux"]["resources"]["devices"]) == 3


def test_a_mount_on_a_parent_after_the_spec_s_mount_means_not_applied_yet() -> None:
    edits = ContainerEdits(
        mounts=[Mount("/host/lib/x.so", "/usr/lib/x.so", ["ro", "bind"])],
        hooks=[Hook("createContainer", "/bin/h")],
    )
    once = apply(base(), edits)
    once["mounts"].append({"destination": "/usr/lib", "type": "tmpfs", "source": "tmpfs"})
    twice = apply(copy.deepcopy(once), edits)
    # The library sorts every mount by depth again: the spec's file is no longer hidden.
    assert [m["destination"] for m in twice["mounts"]][-2:] == ["/usr/lib", "/usr/lib/x.so"]
    assert twice["hooks"]["createContainer"] == [{"path": "/bin/h"}] * 2


def test_a_root_mount_after_the_spec_s_mount_of_the_same_depth_means_not_applied_yet() -> None:
    # "/" and "/dev" have one slash each: the library keeps them in order and moves the spec's to the end.
    edits = ContainerEdits(
        mounts=[Mount("/host/d", "/d", ["bind"])], hooks=[Hook("createContainer", "/bin/h")]
    )
    once = apply(base(), edits)
    once["mounts"].append({"destination": "/", "source": "/host/root", "options": ["bind"]})
    twice = apply(copy.deepcopy(once), edits)
    assert [m["destination"] for m in twice["mounts"]][-2:] == ["/", "/d"]


def test_a_destination_listed_twice_means_not_applied_yet() -> None:
    edits = ContainerEdits(
        mounts=[Mount("/host/d", "/a/d", ["bind"])], hooks=[Hook("createContainer", "/bin/h")]
    )
    once = apply(base(), edits)
    at = len(once["mounts"]) - 1
    once["mounts"].insert(at, {"destination": "/a/d", "type": "tmpfs", "source": "tmpfs"})
    twice = apply(copy.deepcopy(once), edits)
    # The library replaces the first mount of the destination: the tmpfs goes.
    assert [m for m in twice["mounts"] if m["destination"] == "/a/d"] == [once["mounts"][-1]] * 2


def test_mounts_applied_before_are_left_in_place() -> None:
    edits = ContainerEdits(
        mounts=[
            Mount("/h/1", "/opt/a/1", ["bind"]),
            Mount("/h/2", "/b", ["bind"]),
            Mount("/h/3", "/opt/c", []),
        ],
        hooks=[Hook("createContainer", "/bin/h")],
    )
    once = apply(base(), edits)
    assert apply(copy.deepcopy(once), edits) == once


def test_mounts_replace_same_destination_then_sort_by_depth() -> None:
    config = base()
    config["mounts"] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/a/b/c", "source": "/old"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "/x/y", "source": "/x"},
    ]
    mounts = [Mount("/new", "/a/b/c", ["ro"]), Mount("/lib", "/lib", type="bind"), Mount("/p", "//q//r/", [])]
    result = apply(config, ContainerEdits(mounts=mounts))["mounts"]
    assert [m["destination"] for m in result] == ["/proc", "/dev", "/lib", "/x/y", "//q//r/", "/a/b/c"]
    assert result[-1] == {"destination": "/a/b/c", "source": "/new", "options": ["ro"]}
    assert result[2] == {"destination": "/lib", "type": "bind", "source": "/lib"}


def test_hooks_by_stage() -> None:
    hooks = [
        Hook("createContainer", "/bin/a"),
        Hook("prestart", "/bin/b", ["b"], ["E=1"], 3),
        Hook("createContainer", "/bin/c", ["c"]),
    ]
    config = base()
    config["hooks"] = {"createContainer": [{"path": "/bin/existing"}]}
    result = apply(config, ContainerEdits(hooks=hooks))["hooks"]
    assert result == {
        "createContainer": [{"path": "/bin/existing"}, {"path": "/bin/a"}, {"path": "/bin/c", "args": ["c"]}],
        "prestart": [{"path": "/bin/b", "args": ["b"], "env": ["E=1"], "timeout": 3}],
    }


def test_net_devices_intel_rdt_and_gids() -> None:
    config = base()
    config["linux"]["intelRdt"] = {"closID": "old", "l3CacheSchema": "L3:0=1"}
    config["linux"]["netDevices"] = {"eth1": {"name": "old"}}
    config["process"]["user"]["additionalGids"] = [44]
    common = ContainerEdits(intel_rdt=IntelRdt(clos_id="first"), additional_gids=[0, 44, 45])
    edits = ContainerEdits(
        net_devices=[NetDevice("eth1", "net1"), NetDevice("eth2", "net2")],
        intel_rdt=IntelRdt(clos_id="last", schemata=["MB:0=50"], enable_monitoring=True),
        additional_gids=[45, 46],
    )
    result = apply(config, edits, common=common)
    assert result["linux"]["netDevices"] == {"eth1": {"name": "net1"}, "eth2": {"name": "net2"}}
    assert result["linux"]["intelRdt"] == {
        "closID": "last",
        "schemata": ["MB:0=50"],
        "enableMonitoring": True,
    }
    assert result["process"]["user"]["additionalGids"] == [44, 45, 46]


def test_unknown_fields_are_kept_and_nothing_is_created_needlessly() -> None:
    config = apply(base(), ContainerEdits(env=["A=1"]))
    assert config["annotations"] == {"x.example/unknown": "kept"}
    assert config["vendorExtension"] == {"kept": True}
    assert "hooks" not in config and "devices" not in config["linux"]


def test_missing_process_is_created_as_the_go_library_does() -> None:
    assert apply({}, ContainerEdits(env=["A=1"])) == {
        "process": {"user": {"uid": 0, "gid": 0}, "cwd": "", "env": ["A=1"]}
    }


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda c: c["process"].update(env="PATH=/bin"), "process.env", "expected a list"),
        (lambda c: c["process"].update(env=[1]), "process.env[0]", "expected a string"),
        (lambda c: c.update(process=[]), "process", "expected an object"),
        (lambda c: c.update(mounts=[{"destination": 5}]), "mounts[0].destination", "expected a string"),
        (lambda c: c.update(mounts={}), "mounts", "expected a list"),
        (lambda c: c.update(hooks=[]), "hooks", "expected an object"),
        (lambda c: c.update(hooks={"createContainer": {}}), "hooks.createContainer", "expected a list"),
        (lambda c: c["linux"].update(devices=["/dev/x"]), "linux.devices[0]", "expected an object"),
        (lambda c: c["linux"]["resources"].update(devices={}), "linux.resources.devices", "expected a list"),
        (
            lambda c: c["process"]["user"].update(additionalGids=[True]),
            "process.user.additionalGids[0]",
            "expected an integer",
        ),
        (lambda c: c.update(linux="x"), "linux", "expected an object"),
    ],
)
def test_malformed_config_parts_are_refused_untouched(change: Any, field: str, reason: str) -> None:
    config = base()
    change(config)
    before = copy.deepcopy(config)
    edits = ContainerEdits(
        env=["A=1"],
        device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")],
        mounts=[Mount("/h", "/c")],
        hooks=[Hook("createContainer", "/bin/h")],
        additional_gids=[5],
    )
    with pytest.raises(CdictkError) as caught:
        apply(config, edits)
    assert str(caught.value) == f"config.json: {field}: {reason}"
    assert config == before


def test_apply_edits_without_registry() -> None:
    config: dict[str, Any] = {}
    apply_edits(config, [EditsSource({"env": ["A=1"]}, "inline", "containerEdits")], "config.json")
    assert config["process"]["env"] == ["A=1"]


def test_edits_are_copies_of_the_spec() -> None:
    """Trimming the edits for one container must not change the spec another container resolves."""
    edits = ContainerEdits(mounts=[Mount(host_path="/a", container_path="/a", options=["ro"])])
    devices = one(ContainerEdits(env=["B=2"]), edits)
    sources = edits_for(devices)
    sources[0].edits["mounts"][0]["options"].append("rw")
    sources[0].edits["mounts"].clear()
    assert edits.mounts == [Mount(host_path="/a", container_path="/a", options=["ro"])]
