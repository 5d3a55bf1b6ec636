from typing import Any

import pytest

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdictk.cdi.parse import parse_document
from cdictk.startpath.helpers.errors import CdictkError


def decode_yaml(text: str) -> Spec:
    return decode_spec(parse_document(text.encode(), "s.yaml"), "s.yaml")


def error(data: Any) -> str:
    with pytest.raises(CdictkError) as caught:
        decode_spec(data, "s.yaml")
    return str(caught.value)


def minimal(**edits: Any) -> dict[str, Any]:
    return {"cdiVersion": "0.3.0", "kind": "v.com/c", "devices": [{"name": "d", "containerEdits": edits}]}


def test_every_field() -> None:
    spec = decode_yaml(
        """
cdiVersion: 1.1.0
kind: vendor.com/gpu
annotations: {a: b}
devices:
- name: "0"
  annotations: {x: "1"}
  containerEdits:
    env: [A=1]
    deviceNodes:
    - {path: /dev/x, hostPath: /h/x, type: c, major: 1, minor: 2, fileMode: 0660, permissions: rw, uid: 3, gid: 4}
    netDevices: [{hostInterfaceName: eth1, name: net0}]
    hooks: [{hookName: createContainer, path: /bin/h, args: [h, a], env: [E=1], timeout: 5}]
    mounts: [{hostPath: /a, containerPath: /b, options: [ro], type: bind}]
    intelRdt: {closID: c, l3CacheSchema: L3, memBwSchema: "MB:0=50", schemata: [s], enableMonitoring: true}
    additionalGids: [44]
containerEdits:
  env: [B=2]
"""
    )
    assert spec == Spec(
        cdi_version="1.1.0",
        kind="vendor.com/gpu",
        annotations={"a": "b"},
        devices=[
            Device(
                name="0",
                annotations={"x": "1"},
                container_edits=ContainerEdits(
                    env=["A=1"],
                    device_nodes=[DeviceNode("/dev/x", "/h/x", "c", 1, 2, 0o660, "rw", 3, 4)],
                    net_devices=[NetDevice("eth1", "net0")],
                    hooks=[Hook("createContainer", "/bin/h", ["h", "a"], ["E=1"], 5)],
                    mounts=[Mount("/a", "/b", ["ro"], "bind")],
                    intel_rdt=IntelRdt("c", "L3", "MB:0=50", ["s"], True),
                    additional_gids=[44],
                ),
            )
        ],
        container_edits=ContainerEdits(env=["B=2"]),
    )


def test_unknown_field_names_the_path() -> None:
    data = minimal(env=["A=1"])
    data["devices"][0]["containerEdits"]["xyzzy"] = 1
    assert error(data).startswith(
        "s.yaml: devices[0].containerEdits.xyzzy: unknown field (expected one of: env,"
    )


def test_field_names_are_case_sensitive() -> None:
    data = minimal(env=["A=1"])
    data["CDIVersion"] = data.pop("cdiVersion")
    assert (
        error(data) == 's.yaml: CDIVersion: unknown field (field names are case-sensitive: use "cdiVersion")'
    )


def test_removed_intel_rdt_fields() -> None:
    assert "removed in cdiVersion 1.1.0" in error(minimal(intelRdt={"enableCMT": True}))


def test_numbers_and_booleans_in_string_fields_become_text_as_in_go() -> None:
    spec = decode_yaml(
        "cdiVersion: 0.5.0\nkind: v.com/c\ndevices: [{name: 0, containerEdits: {env: [A=1]}}]\n"
    )
    assert spec.devices[0].name == "0"
    spec = decode_yaml(
        "cdiVersion: 0.6.0\nkind: v.com/c\nannotations: {a: 1, b: yes, c: 0660}\ndevices: []\n"
    )
    assert spec.annotations == {"a": "1", "b": "true", "c": "432"}


@pytest.mark.parametrize(("value", "shown"), [(1.5, "the number 1.5"), (1.0, "the number 1.0")])
def test_floats_in_string_fields_are_refused(value: object, shown: str) -> None:
    text = f"cdiVersion: 0.5.0\nkind: v.com/c\ndevices: [{{name: {value}, containerEdits: {{env: [A=1]}}}}]\n"
    with pytest.raises(CdictkError, match=f"devices\\[0\\].name: expected a string, got {shown}: quote it"):
        decode_yaml(text)


def test_a_date_in_a_string_field_is_its_text_as_in_go() -> None:
    text = "cdiVersion: 0.5.0\nkind: v.com/c\ndevices: [{name: 2001-12-14, containerEdits: {env: [A=1]}}]\n"
    assert decode_yaml(text).devices[0].name == "2001-12-14"
    assert decode_yaml(
        text.replace("0.5.0", "0.6.0").replace("devices:", "annotations: {2001-1-2: x}\ndevices:")
    ).annotations == {"2001-1-2": "x"}


def test_null_means_absent() -> None:
    spec = decode_yaml(
        "cdiVersion: 0.3.0\nkind: v.com/c\nannotations: ~\ndevices:\n"
        "- name: d\n  containerEdits: {env: [A=1], deviceNodes: [{path: /dev/x, fileMode: null}]}\n"
    )
    assert spec.annotations == {}
    assert spec.devices[0].container_edits.device_nodes[0].file_mode is None


def test_null_items_of_strings_and_numbers_are_their_zero_values_as_in_go() -> None:
    spec = decode_yaml(
        "cdiVersion: 0.7.0\nkind: v.com/c\nannotations: {a: null}\ndevices:\n- name: d\n  containerEdits:\n"
        "    hooks: [{hookName: prestart, path: /h, args: [h, null]}]\n    additionalGids: [null, 44]\n"
    )
    assert spec.annotations == {"a": ""}
    edits = spec.devices[0].container_edits
    assert (edits.hooks[0].args, edits.additional_gids) == (["h", ""], [0, 44])


@pytest.mark.parametrize("key", ["deviceNodes", "mounts", "hooks", "netDevices"])
def test_a_null_object_in_a_list_is_refused(key: str) -> None:
    assert error(minimal(**{key: [None]})).endswith(f"{key}[0]: expected a mapping, got null")


def test_whole_number_floats_fill_integer_fields_as_in_go() -> None:
    spec = decode_spec(
        minimal(
            deviceNodes=[{"path": "/x", "type": "c", "major": 1.0, "minor": 1e3, "uid": 5.0, "gid": 0.0}],
            hooks=[{"hookName": "prestart", "path": "/h", "timeout": 5.0}],
            additionalGids=[44.0],
        ),
        "s.yaml",
    )
    edits = spec.devices[0].container_edits
    node = edits.device_nodes[0]
    assert (node.major, node.minor, node.uid, node.gid) == (1, 1000, 5, 0)
    assert (edits.hooks[0].timeout, edits.additional_gids) == (5, [44])


@pytest.mark.parametrize(
    ("value", "reason"),
    [(1.5, "expected an integer from 0 to 4294967295, got the number 1.5"), (-0.0, "got the number -0.0"),
     (float("inf"), "got the number inf"), (-1.0, "got the number -1.0")],
)  # fmt: skip
def test_other_floats_are_refused_in_integer_fields(value: float, reason: str) -> None:
    assert reason in error(minimal(deviceNodes=[{"path": "/x", "uid": value}]))


@pytest.mark.parametrize(
    ("edits", "field", "reason"),
    [
        ({"env": "A=1"}, "env", "expected a list of strings, got a string"),
        ({"env": [["A=1"]]}, "env[0]", "expected a string, got a list"),
        (
            {"deviceNodes": [{"path": "/x", "major": "10"}]},
            "deviceNodes[0].major",
            "expected an integer, got a string",
        ),
        (
            {"deviceNodes": [{"path": "/x", "major": True}]},
            "deviceNodes[0].major",
            "expected an integer, got the boolean",
        ),
        ({"deviceNodes": [{"path": "/x", "uid": -1}]}, "deviceNodes[0].uid", "-1 is out of range"),
        (
            {"deviceNodes": [{"path": "/x", "gid": 1 << 32}]},
            "deviceNodes[0].gid",
            "4294967296 is out of range",
        ),
        (
            {"deviceNodes": [{"path": "/x", "major": 1 << 63}]},
            "deviceNodes[0].major",
            "9223372036854775808 is out of range",
        ),
        ({"deviceNodes": ["/x"]}, "deviceNodes[0]", "expected a mapping, got a string"),
        ({"additionalGids": [-5]}, "additionalGids[0]", "-5 is out of range"),
        ({"intelRdt": {"enableMonitoring": "true"}}, "intelRdt.enableMonitoring", "expected true or false"),
        ({"intelRdt": []}, "intelRdt", "expected a mapping, got a list"),
    ],
)
def test_type_errors_name_the_field(edits: dict[str, Any], field: str, reason: str) -> None:
    message = error(minimal(**edits))
    assert message.startswith(f"s.yaml: devices[0].containerEdits.{field}: {reason}")


def test_top_level_must_be_a_mapping() -> None:
    assert error(None) == "s.yaml: no spec data (the document is empty)"
    assert error(["x"]) == "s.yaml: expected a mapping at the top level, got a list"


def test_annotations_must_be_a_map_of_strings() -> None:
    data = minimal(env=["A=1"])
    data["annotations"] = {"a": {"b": "c"}}
    assert error(data) == "s.yaml: annotations.a: expected a string, got a mapping"
