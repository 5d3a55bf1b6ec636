"""The reference library's rules, one case each (cdi.md §2.3, §2.4 and the upstream tests in §7)."""

from typing import Any

import pytest

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.rules import check_spec


def problems(data: dict[str, Any]) -> list[str]:
    return [f"{p.field}: {p.reason}" for p in check_spec(decode_spec(data, "s.yaml"), "s.yaml")]


def spec(version: str = "0.3.0", kind: str = "vendor.com/device", **edits: Any) -> dict[str, Any]:
    return {
        "cdiVersion": version,
        "kind": kind,
        "devices": [{"name": "dev1", "containerEdits": edits or {"env": ["FOO=BAR"]}}],
    }


def test_minimal_spec_is_valid() -> None:
    assert problems(spec()) == []
    assert (
        problems(spec("0.4.0", mounts=[{"hostPath": "tmpfs", "containerPath": "/t", "type": "tmpfs"}])) == []
    )


def test_every_problem_is_reported_not_only_the_first() -> None:
    data = spec("9.9.9", kind="nope", env=["FOO", "=x"])
    assert problems(data) == [
        'cdiVersion: unknown version "9.9.9" (known: 0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0)',
        'kind: invalid kind "nope": want vendor/class, for example nvidia.com/gpu',
        'devices[0].containerEdits.env[0]: invalid environment variable "FOO" (want NAME=VALUE)',
        'devices[0].containerEdits.env[1]: invalid environment variable "=x" (want NAME=VALUE)',
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (spec(version=""), 'cdiVersion: unknown version ""'),
        (spec(version="0.1.0"), "cdiVersion: version 0.1.0 is too old"),
        (
            spec(version="0.6.0", additionalGids=[44]),
            "cdiVersion: version 0.6.0 is too old: the spec's content needs at least 0.7.0",
        ),
        (spec(kind="vendor.comdevice"), 'kind: invalid kind "vendor.comdevice"'),
        (spec(kind="vendor.com-/device"), 'kind: invalid vendor "vendor.com-"'),
        (spec(kind="vendor.com/device="), 'kind: invalid class "device="'),
        (spec(env=[""]), 'devices[0].containerEdits.env[0]: invalid environment variable ""'),
        (
            spec(deviceNodes=[{"path": ""}]),
            "devices[0].containerEdits.deviceNodes[0].path: empty device path",
        ),
        (spec(deviceNodes=[{"path": "/dev/x", "type": "f"}]), 'deviceNodes[0].type: invalid device type "f"'),
        (spec(deviceNodes=[{"path": "/dev/x", "permissions": "to land"}]), 'invalid permissions "to land"'),
        (spec(deviceNodes=[{"path": "/dev/x", "permissions": "none"}]), 'invalid permissions "none"'),
        (spec(mounts=[{"hostPath": "", "containerPath": "/b"}]), "mounts[0].hostPath: empty mount host path"),
        (
            spec(mounts=[{"hostPath": "/a", "containerPath": ""}]),
            "mounts[0].containerPath: empty mount container path",
        ),
        (spec(hooks=[{"hookName": "createContainer", "path": ""}]), "hooks[0].path: empty hook path"),
        (
            spec(hooks=[{"hookName": "misCreateRuntime", "path": "/h"}]),
            'hooks[0].hookName: invalid hook name "misCreateRuntime"',
        ),
        (
            spec(hooks=[{"hookName": "prestart", "path": "/h", "env": ["=value2"]}]),
            'hooks[0].env[0]: invalid environment variable "=value2"',
        ),
        (spec("0.7.0", intelRdt={"closID": "foo/bar"}), 'intelRdt.closID: invalid closID "foo/bar"'),
        (spec("0.7.0", intelRdt={"closID": "."}), 'intelRdt.closID: invalid closID "."'),
        (spec("0.7.0", intelRdt={"closID": ".."}), 'intelRdt.closID: invalid closID ".."'),
        (spec("0.7.0", intelRdt={"closID": "foo\nbar"}), "intelRdt.closID: invalid closID"),
        (spec("0.7.0", intelRdt={"closID": "x" * 4096}), "intelRdt.closID: invalid closID"),
        (
            spec("1.1.0", netDevices=[{"hostInterfaceName": "", "name": "n"}]),
            "netDevices[0].hostInterfaceName: empty host interface name",
        ),
        (
            spec("1.1.0", netDevices=[{"hostInterfaceName": "h", "name": ""}]),
            "netDevices[0].name: empty interface name",
        ),
        (
            spec(
                "1.1.0",
                netDevices=[{"hostInterfaceName": "h", "name": "a"}, {"hostInterfaceName": "h", "name": "b"}],
            ),
            'netDevices[1].hostInterfaceName: duplicate host interface "h"',
        ),
        (
            spec(
                "1.1.0",
                netDevices=[
                    {"hostInterfaceName": "h1", "name": "a"},
                    {"hostInterfaceName": "h2", "name": "a"},
                ],
            ),
            'netDevices[1].name: duplicate interface name "a"',
        ),
    ],
)
def test_rule(data: dict[str, Any], expected: str) -> None:
    found = problems(data)
    assert any(expected in problem for problem in found), found


@pytest.mark.parametrize("clos_id", ["/", "group1", ""])
def test_valid_clos_ids(clos_id: str) -> None:
    assert problems(spec("0.7.0", intelRdt={"closID": clos_id})) == []


def test_permissions_in_any_order_and_repeated() -> None:
    assert problems(spec(deviceNodes=[{"path": "/dev/x", "permissions": "mwrr"}])) == []


def test_device_names() -> None:
    data = spec()
    data["devices"][0]["name"] = "a dev ice"
    assert problems(data) == [
        'devices[0].name: invalid device name "a dev ice": only letters, digits, "_", ".", ":" and "-" are allowed'
    ]


def test_device_without_edits() -> None:
    data = {
        "cdiVersion": "0.3.0",
        "kind": "v.com/c",
        "devices": [{"name": "d"}, {"name": "e", "containerEdits": {"env": []}}],
    }
    assert problems(data) == [
        "devices[0].containerEdits: the device has no edits (a device needs at least one)",
        "devices[1].containerEdits: the device has no edits (a device needs at least one)",
    ]


def test_intel_rdt_alone_counts_as_an_edit() -> None:
    data = {
        "cdiVersion": "0.7.0",
        "kind": "v.com/c",
        "devices": [{"name": "d", "containerEdits": {"intelRdt": {}}}],
    }
    assert problems(data) == []


def test_duplicate_device_names() -> None:
    data = spec()
    data["devices"].append({"name": "dev1", "containerEdits": {"env": ["A=1"]}})
    assert problems(data) == ['devices[1].name: duplicate device name "dev1" (also devices[0])']


def test_no_devices() -> None:
    data = {"cdiVersion": "0.3.0", "kind": "v.com/c", "containerEdits": {"env": ["A=1"]}}
    assert problems(data) == ["devices: the spec defines no devices"]


def test_spec_level_edits_are_checked() -> None:
    data = spec()
    data["containerEdits"] = {"env": ["BAD"]}
    assert problems(data) == ['containerEdits.env[0]: invalid environment variable "BAD" (want NAME=VALUE)']


def test_problems_name_the_file() -> None:
    found = check_spec(decode_spec(spec(env=["X"]), "a.yaml"), "/etc/cdi/a.yaml")
    assert (
        str(found[0])
        == '/etc/cdi/a.yaml: devices[0].containerEdits.env[0]: invalid environment variable "X" (want NAME=VALUE)'
    )
