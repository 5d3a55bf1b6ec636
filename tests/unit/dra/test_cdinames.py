"""A claim's CDI names as NVIDIA's DRA driver forms them, checked by the CDI name rules, and its spec
file as cdictk.api's transient spec store keeps it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.api import InvalidNameError, NodeSpecs, Spec, parse_qualified_name
from cdictk.cdi.model import ContainerEdits, Device
from cdictk.dra import cdinames
from tests.conftest import NodeFactory

UID = "dab5ab50-7c1e-4b6a-9d5e-2f6c0e4a1b23"


def test_the_kind_is_nvidias_claim_kind() -> None:
    assert (cdinames.VENDOR, cdinames.DEVICE_CLASS, cdinames.KIND) == (
        "k8s.gpu.nvidia.com",
        "claim",
        "k8s.gpu.nvidia.com/claim",
    )


@pytest.mark.parametrize(
    ("device", "name"),
    [
        ("gpu-0", f"{UID}-gpu-0"),
        ("gpu-1-mig-2g47gb-14-0", f"{UID}-gpu-1-mig-2g47gb-14-0"),
        ("gpu-vfio-3", f"{UID}-gpu-vfio-3"),
    ],
)
def test_a_device_is_named_by_the_claim_uid_and_its_slice_name(device: str, name: str) -> None:
    assert cdinames.device_name(UID, device) == name
    qualified = cdinames.cdi_device_id(UID, device)
    assert qualified == f"k8s.gpu.nvidia.com/claim={name}"
    parsed = parse_qualified_name(qualified)
    assert (parsed.vendor, parsed.cls, parsed.name) == ("k8s.gpu.nvidia.com", "claim", name)


@pytest.mark.parametrize(
    ("uid", "device", "message"),
    [
        ("", "gpu-0", "claim uid: empty device name"),
        ("../etc", "gpu-0", 'claim uid: invalid device name "../etc": must start with a letter or digit'),
        ("a/b", "gpu-0", "claim uid: invalid device name"),
        (UID, "gpu/0", 'device: invalid device name "gpu/0"'),
        (UID, "", "device: empty device name"),
        (UID, "gpu 0", "device: invalid device name"),
    ],
)
def test_names_the_cdi_rules_refuse_fail_in_one_line(uid: str, device: str, message: str) -> None:
    with pytest.raises(InvalidNameError) as refused:
        cdinames.cdi_device_id(uid, device)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_the_spec_file_is_the_transient_spec_name_of_the_claim(tmp_path: Path) -> None:
    assert cdinames.spec_name(UID) == f"k8s.gpu.nvidia.com-claim_{UID}"
    store = cdinames.claim_specs(str(tmp_path))
    assert store.kind == cdinames.KIND
    # NVIDIA's driver writes the same name with .yaml; ours is the store's JSON
    assert store.path(UID) == f"{tmp_path}/k8s.gpu.nvidia.com-claim_{UID}.json"
    assert cdinames.claim_specs().spec_dir == "/var/run/cdi"


@pytest.mark.parametrize("uid", ["", "..", ".", "a/b", "a\0b"])
def test_a_claim_uid_that_is_no_name_never_reaches_a_file_name(uid: str) -> None:
    with pytest.raises(InvalidNameError, match=r"^claim uid: "):
        cdinames.spec_name(uid)


def test_a_written_spec_answers_the_names_and_either_suffix_is_removed(tmp_path: Path) -> None:
    """What the store writes is found under the name NVIDIA's driver uses, whichever suffix it has."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir(mode=0o755)
    store = cdinames.claim_specs(str(spec_dir))
    name = cdinames.device_name(UID, "gpu-0")
    spec = Spec(
        kind=cdinames.KIND,
        devices=[Device(name=name, container_edits=ContainerEdits(env=["A=1"]))],
        cdi_version="0.5.0",
    )
    assert store.write(UID, spec) == [cdinames.cdi_device_id(UID, "gpu-0")]
    assert os.listdir(spec_dir) == [cdinames.spec_name(UID) + ".json"]
    store.remove(UID)
    yaml = spec_dir / (cdinames.spec_name(UID) + ".yaml")  # as NVIDIA's driver would have left it
    yaml.write_text(
        f'cdiVersion: "0.5.0"\nkind: {cdinames.KIND}\ndevices:\n- name: {name}\n  containerEdits:\n    env: ["A=1"]\n'
    )
    assert store.list() == [UID]
    store.remove(UID)
    assert os.listdir(spec_dir) == []


@pytest.mark.root
def test_the_node_specs_claim_devices_have_the_same_form(make_node: NodeFactory) -> None:
    """cdictk.api's claim spec names devices <claim uid>-<id> too: with the claim kind it is a spec of
    this store's."""
    node = make_node("eight")
    specs = NodeSpecs(
        node.root,
        proc_root=node.proc,
        sys_root=node.sys,
        vendor=cdinames.VENDOR,
        device_class=cdinames.DEVICE_CLASS,
    )
    spec = specs.claim_spec(UID, ["1"])
    assert spec.kind == cdinames.KIND
    assert [device.name for device in spec.devices] == [cdinames.device_name(UID, "1")]
