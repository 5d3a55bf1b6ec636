from typing import Any

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
    SpecField,
    spec_fields,
)
from cdictk.cdi.version import (
    KNOWN_VERSIONS,
    is_newer,
    minimum_version,
    reference_minimum_version,
    version_problem,
)


def spec(
    edits: ContainerEdits | None = None, *, name: str = "d", kind: str = "v.com/c", **extra: object
) -> Spec:
    device = Device(name=name, container_edits=edits or ContainerEdits(env=["A=1"]))
    result = Spec(cdi_version="0.3.0", kind=kind, devices=[device])
    for key, value in extra.items():
        setattr(result, key, value)
    return result


@pytest.mark.parametrize(
    ("subject", "needed"),
    [
        (spec(), "0.3.0"),
        (spec(ContainerEdits(mounts=[Mount("/a", "/b", type="bind")])), "0.4.0"),
        (spec(ContainerEdits(mounts=[Mount("/a", "/b")])), "0.3.0"),
        (spec(ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/x")])), "0.5.0"),
        (spec(name="0"), "0.5.0"),
        (spec(annotations={"a": "b"}), "0.6.0"),
        (spec(kind="v.com/c.sub"), "0.6.0"),
        (spec(kind="vcom.c"), "0.3.0"),  # no vendor: the class gate does not apply
        (spec(ContainerEdits(intel_rdt=IntelRdt())), "0.7.0"),
        (spec(ContainerEdits(additional_gids=[0])), "0.7.0"),
        (spec(ContainerEdits(additional_gids=[])), "0.3.0"),
        (spec(ContainerEdits(intel_rdt=IntelRdt(schemata=[]))), "1.1.0"),
        (spec(ContainerEdits(intel_rdt=IntelRdt(enable_monitoring=True))), "1.1.0"),
        (spec(ContainerEdits(net_devices=[NetDevice("eth0", "n0")])), "1.1.0"),
    ],
)
def test_minimum_version_gates(subject: Spec, needed: str) -> None:
    assert minimum_version(subject) == needed


WRITTEN: dict[Kind, Any] = {
    Kind.STR: "x",
    Kind.INT64: 1,
    Kind.UINT32: 1,
    Kind.BOOL: True,
    Kind.STRS: ["x"],
    Kind.UINT32S: [1],
    Kind.STRMAP: {"a": "b"},
}


def holding(cls: type, attr: str, value: Any) -> Spec:
    """A 0.3.0 spec with ``attr`` of one ``cls`` set to ``value``."""
    subject = spec()
    edits = subject.devices[0].container_edits
    obj: Any = {Spec: subject, Device: subject.devices[0], ContainerEdits: edits}.get(cls) or cls()
    setattr(obj, attr, value)
    lists: dict[type, list[Any]] = {
        DeviceNode: edits.device_nodes,
        Mount: edits.mounts,
        Hook: edits.hooks,
        NetDevice: edits.net_devices,
    }
    if cls in lists:
        lists[cls].append(obj)
    elif cls is IntelRdt:
        edits.intel_rdt = obj
    return subject


@pytest.mark.parametrize(
    ("cls", "field"),
    [(cls, field) for cls in MODEL_CLASSES for field in spec_fields(cls)],
    ids=lambda x: x.__name__ if isinstance(x, type) else x.key,
)
def test_every_field_written_needs_the_version_its_metadata_names(cls: type, field: SpecField) -> None:
    if field.cls is None:
        value = WRITTEN[field.kind]
    else:
        value = field.cls() if field.kind is Kind.OBJ else [field.cls()]
    holder = {NetDevice: "1.1.0", IntelRdt: "0.7.0"}.get(cls, "0.3.0")  # the field that holds it
    needed = max(field.since, holder, key=KNOWN_VERSIONS.index)
    assert minimum_version(holding(cls, field.attr, value)) == needed


def test_spec_level_edits_count_too() -> None:
    subject = spec()
    subject.container_edits = ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/y")])
    assert minimum_version(subject) == "0.5.0"
    device_level = spec()
    device_level.devices[0].annotations = {"a": "b"}
    assert minimum_version(device_level) == "0.6.0"


def test_the_reference_library_looks_for_host_paths_and_mount_types_in_the_last_device_only() -> None:
    host_path = ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/y")])
    mount_type = ContainerEdits(mounts=[Mount("/a", "/b", type="bind")])
    for edits, needed in ((host_path, "0.5.0"), (mount_type, "0.4.0")):
        subject = spec(edits)
        subject.devices.append(Device(name="last", container_edits=ContainerEdits(env=["A=1"])))
        assert (minimum_version(subject), reference_minimum_version(subject)) == (needed, "0.3.0")
        subject.devices.reverse()
        assert (minimum_version(subject), reference_minimum_version(subject)) == (needed, needed)
    # Its other gates see every device.
    subject = spec(name="0")
    subject.devices.append(Device(name="last", container_edits=ContainerEdits(additional_gids=[5])))
    subject.devices.append(Device(name="end", container_edits=ContainerEdits(env=["A=1"])))
    assert reference_minimum_version(subject) == "0.7.0"


@pytest.mark.parametrize("declared", ["0.3.0", "v0.3.0", "1.0.0", "v1.1.0"])
def test_accepted_versions(declared: str) -> None:
    subject = spec()
    subject.cdi_version = declared
    assert version_problem(subject) is None


@pytest.mark.parametrize("declared", ["", "1.0.1", "1.2.0", "0.5.1", "not-a-version", "0.0.0", "vv0.3.0"])
def test_unknown_versions(declared: str) -> None:
    subject = spec()
    subject.cdi_version = declared
    assert version_problem(subject) == (
        f'unknown version "{declared}" (known: 0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0)'
    )


@pytest.mark.parametrize("declared", ["0.1.0", "v0.2.0"])
def test_pre_0_3_versions_are_too_old(declared: str) -> None:
    subject = spec()
    subject.cdi_version = declared
    assert (
        version_problem(subject) == f"version {declared} is too old: the spec's content needs at least 0.3.0"
    )


def test_version_below_content() -> None:
    subject = spec(ContainerEdits(additional_gids=[44]))
    subject.cdi_version = "0.6.0"
    assert version_problem(subject) == "version 0.6.0 is too old: the spec's content needs at least 0.7.0"


def test_is_newer() -> None:
    assert is_newer("1.0.0", "0.5.0")
    assert is_newer("v0.6.0", "0.5.0")
    assert not is_newer("0.5.0", "v0.5.0")
