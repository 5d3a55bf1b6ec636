import json
from typing import Any

import jsonschema
import pytest

from cdictk.cdi.model import (
    MODEL_CLASSES,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Kind,
    Mount,
    NetDevice,
    Spec,
    spec_fields,
)
from cdictk.cdi.parse import parse_document
from cdictk.cdi.schema import field_path, inline_refs, load_schema, schema_problems
from tests import REPO


def problems(document: dict[str, Any]) -> list[str]:
    return [f"{p.field}: {p.reason}" for p in schema_problems(document, "s.json")]


def spec(**edits: Any) -> dict[str, Any]:
    return {
        "cdiVersion": "1.1.0",
        "kind": "v.com/c",
        "devices": [{"name": "d", "containerEdits": edits or {"env": ["A=1"]}}],
    }


def test_schema_is_a_valid_2020_12_schema_and_is_the_packaged_one() -> None:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    packaged = REPO / "cdictk" / "cdi" / "schemas" / "cdi-spec.schema.json"
    assert schema == json.loads(packaged.read_text())
    # The top-level schemas/, where a reader of the repository looks for it, is the package's folder.
    assert (REPO / "schemas").resolve() == packaged.parent


def schema_of(cls: type) -> dict[str, Any]:
    schema = load_schema()
    names = {
        Spec: schema,
        Device: "device",
        ContainerEdits: "containerEdits",
        DeviceNode: "deviceNode",
        Mount: "mount",
        Hook: "hook",
        IntelRdt: "intelRdt",
        NetDevice: "netDevice",
    }
    found = names[cls]
    return found if isinstance(found, dict) else schema["$defs"][found]


JSON_TYPES = {
    Kind.STR: "string",
    Kind.INT64: "integer",
    Kind.UINT32: "integer",
    Kind.BOOL: "boolean",
    Kind.STRS: "array",
    Kind.UINT32S: "array",
    Kind.STRMAP: "object",
    Kind.OBJ: "object",
    Kind.OBJS: "array",
}


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_schema_and_model_know_the_same_fields(cls: type) -> None:
    """The schema is written by hand; the model's field metadata is where a field is declared. The
    keys, their order, which are required (as in the reference library's schema) and the JSON
    type of each must agree."""
    definition = schema_of(cls)
    fields = spec_fields(cls)
    assert list(definition["properties"]) == [f.key for f in fields]
    assert definition.get("required", []) == [f.key for f in fields if f.required]
    assert definition["additionalProperties"] is False
    flat = inline_refs({"$defs": load_schema()["$defs"], **definition})
    for field in fields:
        declared = flat["properties"][field.key].get("type")
        assert declared in (None, JSON_TYPES[field.kind]), field.key  # None: an enum or a pattern alone


def test_example_spec_is_valid() -> None:
    path = REPO / "examples" / "cdi" / "nvidia.yaml"
    assert problems(parse_document(path.read_bytes(), str(path))) == []


def test_every_field_valid() -> None:
    document = spec(
        env=["A=1", "B="],
        deviceNodes=[{"path": "/dev/x", "hostPath": "/h", "type": "c", "major": 1, "minor": 2, "fileMode": 438,
                      "permissions": "rw", "uid": 0, "gid": 0}],
        netDevices=[{"hostInterfaceName": "eth0", "name": "net%d"}],
        hooks=[{"hookName": "createRuntime", "path": "/h", "args": ["h"], "env": ["E=1"], "timeout": 1}],
        mounts=[{"hostPath": "tmpfs", "containerPath": "/t", "options": ["size=1m"], "type": "tmpfs"}],
        intelRdt={"closID": "/", "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=50", "schemata": [], "enableMonitoring": False},
        additionalGids=[0, 44],
    )  # fmt: skip
    document["annotations"] = {"vendor.com/key": "v", "Name_1.x": "", "a" * 63: "v"}
    assert problems(document) == []


@pytest.mark.parametrize(
    ("edits", "field"),
    [
        ({"deviceNodes": [{"path": "dev/x"}]}, "devices[0].containerEdits.deviceNodes[0].path"),
        (
            {"deviceNodes": [{"path": "/dev/x", "hostPath": "x"}]},
            "devices[0].containerEdits.deviceNodes[0].hostPath",
        ),
        (
            {"deviceNodes": [{"path": "/dev/x", "fileMode": 4096}]},
            "devices[0].containerEdits.deviceNodes[0].fileMode",
        ),
        (
            {"mounts": [{"hostPath": "/a", "containerPath": "b"}]},
            "devices[0].containerEdits.mounts[0].containerPath",
        ),
        (
            {"hooks": [{"hookName": "poststop", "path": "/h", "timeout": 0}]},
            "devices[0].containerEdits.hooks[0].timeout",
        ),
        ({"hooks": [{"hookName": "poststop", "path": "h"}]}, "devices[0].containerEdits.hooks[0].path"),
        ({"intelRdt": {"memBwSchema": "L3:0"}}, "devices[0].containerEdits.intelRdt.memBwSchema"),
        ({"intelRdt": {"closID": ".."}}, "devices[0].containerEdits.intelRdt.closID"),
        (
            {"netDevices": [{"hostInterfaceName": "x" * 16, "name": "n"}]},
            "devices[0].containerEdits.netDevices[0].hostInterfaceName",
        ),
        ({"env": [1]}, "devices[0].containerEdits.env[0]"),
        ({"additionalGids": [-1]}, "devices[0].containerEdits.additionalGids[0]"),
    ],
)
def test_stricter_than_runtimes(edits: dict[str, Any], field: str) -> None:
    found = problems(spec(**edits))
    assert len(found) == 1 and found[0].startswith(f"{field}: "), found


@pytest.mark.parametrize(
    "key", ["a b", "-x", "x/", "/x", "a/b/c", "a" * 64, ("d" * 254) + "/x", "ex_ample.com/k"]
)
def test_annotation_keys(key: str) -> None:
    document = spec()
    document["annotations"] = {key: "v"}
    assert [p.split(":")[0] for p in problems(document)] == ["annotations"]


def test_structure() -> None:
    assert problems({}) == [
        ": 'cdiVersion' is a required property",
        ": 'kind' is a required property",
        ": 'devices' is a required property",
    ]
    document = spec()
    document["devices"] = []
    document["xyzzy"] = 1
    assert sorted(problems(document)) == [
        ": Additional properties are not allowed ('xyzzy' was unexpected)",
        "devices: [] should be non-empty",
    ]


def test_names_and_versions() -> None:
    document = spec()
    document["cdiVersion"] = "0.2.0"
    document["kind"] = "nvidia.com"
    document["devices"][0]["name"] = "-0"
    assert [p.split(":")[0] for p in problems(document)] == ["cdiVersion", "devices[0].name", "kind"]


@pytest.mark.parametrize(
    ("kind", "valid"),
    [
        ("v" * 253 + "/" + "c" * 63, True),
        ("vendor.com/class_1", True),
        ("my_vendor.com/gpu", False),
        ("v" * 254 + "/gpu", False),
        ("vendor.com/" + "c" * 64, False),
    ],
)
def test_kind_follows_the_specification(kind: str, valid: bool) -> None:
    document = spec()
    document["kind"] = kind
    assert [p.split(":")[0] for p in problems(document)] == ([] if valid else ["kind"])


def test_inlined_schema_gives_the_same_findings() -> None:
    schema = load_schema()
    flat = inline_refs(schema)
    assert "$ref" not in json.dumps(flat) and "$defs" not in flat
    bad = spec(deviceNodes=[{"path": "x", "fileMode": -1}], hooks=[{"hookName": "x", "path": "/h"}])
    with_refs = sorted(e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(bad))
    inlined = sorted(e.message for e in jsonschema.Draft202012Validator(flat).iter_errors(bad))
    assert with_refs == inlined and len(with_refs) == 3


def test_inline_refs_refuses_what_it_cannot_inline() -> None:
    with pytest.raises(ValueError, match="only local"):
        inline_refs({"properties": {"a": {"$ref": "https://example.com/x.json"}}})
    with pytest.raises(ValueError, match="recursive"):
        inline_refs({"$defs": {"a": {"items": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"})


def test_field_path() -> None:
    assert field_path(["devices", 0, "containerEdits", "env", 2]) == "devices[0].containerEdits.env[2]"
    assert field_path([]) == ""
