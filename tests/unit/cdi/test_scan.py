"""The spec dirs scanned into their index's stored form: a spec file once, its devices naming it by
number, and a spec made in memory in the form the index takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.cdi.dump import to_data
from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.registry import load_registry
from cdictk.cdi.scan import index_data, scan, spec_data
from cdictk.startpath.specs.index import SpecIndex
from tests.unit.cdi.test_registry import write_spec


def test_a_spec_s_devices_share_its_record(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "a.yaml", "0", "1", env="A=1")
    write_spec(tmp_path / "run", "b.yaml", "1", env="B=1")  # the later dir wins
    dirs = (str(tmp_path / "etc"), str(tmp_path / "run"))
    data = scan(dirs, require_dirs=False, trusted_only=False)
    assert [(spec["path"], spec["kind"]) for spec in data["specs"]] == [
        (str(tmp_path / "etc" / "a.yaml"), "vendor.com/gpu"),
        (str(tmp_path / "run" / "b.yaml"), "vendor.com/gpu"),
    ]
    assert data == index_data(load_registry(dirs, trusted_only=False))
    index = SpecIndex.built(dirs, data)
    assert index.dirs == dirs
    assert index.devices["vendor.com/gpu=0"].spec is index.specs[0]
    assert index.devices["vendor.com/gpu=1"].spec is index.specs[1]
    assert index.devices["vendor.com/gpu=1"].edits == {"env": ["B=1"]}


def test_a_missing_required_dir_is_a_problem(tmp_path: Path) -> None:
    missing = (str(tmp_path / "nowhere"),)
    data = scan(missing, require_dirs=True, trusted_only=False)
    assert data["problems"] == [{"file": missing[0], "field": "", "reason": "no such spec directory"}]
    assert scan(missing, require_dirs=False, trusted_only=False)["problems"] == []


def test_spec_data_is_what_the_index_takes() -> None:
    edits = ContainerEdits(env=["D=1"])
    spec = Spec(
        kind="v.com/c",
        devices=[Device(name="d", container_edits=edits)],
        container_edits=ContainerEdits(env=["C=1"]),
    )
    assert spec_data(spec) == ["v.com/c", {"env": ["C=1"]}, [["d", to_data(edits)]]]
    held = SpecIndex((), [], {}, []).with_spec_data(spec_data(spec), "<memory>")
    assert [(source.edits, source.field) for source in held.resolve(["v.com/c=d"])] == [
        ({"env": ["C=1"]}, "containerEdits"),
        ({"env": ["D=1"]}, "devices[0].containerEdits"),
    ]


def test_an_index_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="another shape"):
        SpecIndex.built((), {"specs": [], "devices": {"v.com/c=d": {"spec": 0}}, "problems": []})
