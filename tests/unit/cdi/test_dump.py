import itertools
import json
import random

import pytest
import yaml

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.dump import dump, dump_json, dump_yaml, to_data
from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdictk.cdi.parse import parse_document


def full_spec() -> Spec:
    return Spec(
        cdi_version="1.1.0",
        kind="vendor.com/gpu",
        annotations={"vendor.com/x": "y"},
        devices=[
            Device(
                name="0",
                container_edits=ContainerEdits(
                    env=["A=1"],
                    device_nodes=[DeviceNode(path="/dev/x", host_path="/h/x", file_mode=0o666, uid=0)],
                    net_devices=[NetDevice("eth1", "net0")],
                    hooks=[Hook("createContainer", "/bin/h", ["h"], ["E=1"], 5)],
                    mounts=[Mount("/a", "/b", ["ro"], "bind")],
                    intel_rdt=IntelRdt(clos_id="c", schemata=[]),
                    additional_gids=[44],
                ),
            ),
            Device(name="yes", container_edits=ContainerEdits(env=["B=on"])),
        ],
        container_edits=ContainerEdits(env=["C=3"]),
    )


def test_yaml_starts_with_document_marker_and_keeps_spec_order() -> None:
    text = dump_yaml(full_spec())
    assert text.startswith("---\ncdiVersion: 1.1.0\nkind: vendor.com/gpu\nannotations:\n")
    keys = [
        line.split(":")[0] for line in text.splitlines() if line and not line.startswith((" ", "-", "---"))
    ]
    assert keys == ["cdiVersion", "kind", "annotations", "devices", "containerEdits"]
    node = text.index("path: /dev/x")
    assert node < text.index("hostPath: /h/x") < text.index("fileMode: 438") < text.index("uid: 0")


@pytest.mark.parametrize(
    "value",
    ["y", "n", "yes", "no", "on", "off", "0", "1.0", "0660", "~", "null", "2001-12-14", "1:2", "0:10"],
)
def test_strings_a_yaml_1_1_reader_would_retype_are_quoted(value: str) -> None:
    spec = Spec(cdi_version="0.5.0", kind="v.com/c", devices=[Device(name=value)])
    text = dump_yaml(spec)
    assert f'name: "{value}"' in text or f"name: '{value}'" in text
    assert decode_spec(parse_document(text.encode(), "s.yaml"), "s.yaml").devices[0].name == value
    assert yaml.safe_load(text)["devices"][0]["name"] == value  # PyYAML reads 1:2 unquoted as 62


def test_plain_strings_are_not_quoted() -> None:
    text = dump_yaml(Spec(cdi_version="0.5.0", kind="v.com/c", devices=[Device(name="gpu0")]))
    assert "name: gpu0\n" in text
    assert "cdiVersion: 0.5.0\n" in text


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip(fmt: str) -> None:
    spec = full_spec()
    text = dump(spec, fmt)
    assert decode_spec(parse_document(text.encode(), f"s.{fmt}"), f"s.{fmt}") == spec
    assert dump(spec, fmt) == text  # deterministic


def test_omitted_fields_follow_the_reference_library() -> None:
    data = to_data(Spec(cdi_version="0.3.0", kind="v.com/c", devices=[Device(name="d")]))
    # Device edits and the spec's edits are always written; empty lists and zero values are not.
    assert data == {
        "cdiVersion": "0.3.0",
        "kind": "v.com/c",
        "devices": [{"name": "d", "containerEdits": {}}],
        "containerEdits": {},
    }
    node = to_data(ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", major=0, file_mode=0)]))
    assert node == {"deviceNodes": [{"path": "/dev/x", "fileMode": 0}]}


def test_empty_schemata_is_kept_because_it_needs_1_1_0() -> None:
    assert to_data(IntelRdt(schemata=[])) == {"schemata": []}
    assert to_data(IntelRdt()) == {}


def test_json_is_indented_and_ends_with_newline() -> None:
    text = dump_json(full_spec())
    assert text.endswith("}\n")
    assert list(json.loads(text)) == ["cdiVersion", "kind", "annotations", "devices", "containerEdits"]


def test_dump_does_not_share_lists_with_the_model() -> None:
    spec = full_spec()
    data = to_data(spec)
    data["devices"][0]["containerEdits"]["env"].append("X=1")
    assert spec.devices[0].container_edits.env == ["A=1"]


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown format"):
        dump(full_spec(), "toml")


@pytest.mark.parametrize(
    "value",
    [
        "yes",
        "1:2",
        "<<",
        "=",
        "- x",
        "a: b",
        "#c",
        "  lead",
        "trail ",
        "",
        "ü",
        "line\nbreak",
        "{x}",
        "*a",
        "@at",
        "0x_",
        "-0b_",
        "tab\there",
        "a::b",
        "x" * 5000,
    ],
)
def test_every_string_reads_back_the_same_in_pyyaml(value: str) -> None:
    spec = Spec(
        cdi_version="0.6.0",
        kind="v.com/c",
        annotations={value or "k": value},
        devices=[Device(name="d", container_edits=ContainerEdits(env=[f"A={value}", value]))],
    )
    data = yaml.safe_load(dump_yaml(spec))
    assert data["annotations"] == {value or "k": value}
    assert data["devices"][0]["containerEdits"]["env"] == [f"A={value}", value]


def resolver_probes() -> list[str]:
    """Strings near every rule of YAML 1.1's and PyYAML's plain scalars."""
    printable = "".join(map(chr, range(0x20, 0x7F)))
    strings = ["".join(chars) for length in (1, 2) for chars in itertools.product(printable, repeat=length)]
    strings += ["".join(chars) for chars in itertools.product("019+-._:eEx~yn<=!*/", repeat=3)]
    strings += ["".join(chars) for chars in itertools.product("016+-._:eExbT Z", repeat=4)]
    tokens = ["0", "1", "5", "7", "9", "12", "59", "60", "2001", "-", "+", ".", "_", ":", "e", "E", "e+", "x"]
    tokens += [
        "0x",
        "0b",
        "0o",
        "T",
        "t",
        "Z",
        " ",
        "\t",
        "a",
        "F",
        "inf",
        "nan",
        "NaN",
        "~",
        "yes",
        "Off",
        "<<",
    ]
    rng = random.Random(19)  # noqa: S311 (a fixed seed: the same strings every run)
    strings += ["".join(rng.choices(tokens, k=rng.randint(1, 10))) for _ in range(30000)]
    strings += timestamp_probes()
    # PyYAML's $ also matches before a final line break; non-ASCII digits are no digits to it.
    strings += [text + "\n" for text in strings[:20000]] + [
        "1\n\n",
        "yes\n\n",
        "\n",
        "\u0661",
        "1\u0661",
        "\uff11",
    ]
    return list(dict.fromkeys(strings))


def timestamp_probes() -> list[str]:
    """Dates and times, right and nearly right in each part."""
    dates = [
        f"{y}-{m}-{d}"
        for y in ("2001", "201", "20011")
        for m in ("1", "12", "123", "")
        for d in ("4", "14", "144")
    ]
    times = [
        "",
        "T21:59:43",
        "t1:59:43",
        " 21:59:43",
        "  2:59:43",
        "\t21:59:43",
        "T21:5:43",
        "T21:59:4",
        "T21:59",
    ]
    fractions = ["", ".", ".10", ".1x"]
    zones = ["", "Z", " Z", "\tZ", "-5", "+05:00", " -05:30", "+5:0", "-123", "z"]
    return [
        date + time + fraction + zone
        for date in dates
        for time in times
        for fraction in fractions
        for zone in zones
    ]


def test_every_probe_reads_back_the_same_in_pyyaml_and_by_go_rules() -> None:
    """The dumper quotes what either reader would retype, and nothing reads differently."""
    probes = resolver_probes()
    spec = Spec(cdi_version="0.6.0", kind="v.com/c", container_edits=ContainerEdits(env=probes))
    text = dump_yaml(spec)
    assert yaml.safe_load(text)["containerEdits"]["env"] == probes
    assert parse_document(text.encode(), "spec.yaml")["containerEdits"]["env"] == probes
