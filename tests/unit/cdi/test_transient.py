import os
import stat
from pathlib import Path

import pytest

from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.transient import SpecDirError, SpecExistsError, TransientSpecs, transient_spec_name
from cdictk.startpath.helpers.errors import CdictkError


def claim_spec(claim: str, kind: str = "vendor.com/gpu", env: str = "A=1") -> Spec:
    device = Device(name=f"{claim}-0", container_edits=ContainerEdits(env=[env]))
    return Spec(cdi_version="0.3.0", kind=kind, devices=[device])


def test_the_name_is_the_reference_librarys() -> None:
    assert transient_spec_name("vendor.com", "gpu", "ns/claim") == "vendor.com-gpu_ns_claim"
    with pytest.raises(CdictkError, match='class: invalid class "-x": must start with a letter'):
        transient_spec_name("vendor.com", "-x", "claim")
    with pytest.raises(CdictkError, match="claim uid: empty"):
        transient_spec_name("vendor.com", "gpu", "")
    with pytest.raises(CdictkError, match="cannot be part of a file name"):
        transient_spec_name("vendor.com", "gpu", "..")


def test_write_list_remove(tmp_path: Path) -> None:
    store = TransientSpecs(str(tmp_path / "cdi"), "vendor.com", "gpu")
    assert store.list() == [] and store.gc([]) == []  # no dir yet: nothing, and nothing made
    assert not (tmp_path / "cdi").exists()
    assert store.write("c1", claim_spec("c1")) == ["vendor.com/gpu=c1-0"]
    assert store.write("ns/c2", claim_spec("c2")) == ["vendor.com/gpu=c2-0"]
    assert stat.S_IMODE((tmp_path / "cdi").stat().st_mode) == 0o755
    assert sorted(os.listdir(tmp_path / "cdi")) == ["vendor.com-gpu_c1.json", "vendor.com-gpu_ns_c2.json"]
    assert store.list() == ["c1", "ns_c2"]
    store.remove("ns/c2")
    store.remove("ns/c2")
    assert store.list() == ["c1"]


def test_remove_takes_a_yaml_spec_the_go_library_wrote_for_the_claim(tmp_path: Path) -> None:
    store = TransientSpecs(str(tmp_path), "vendor.com", "gpu")
    (tmp_path / "vendor.com-gpu_c1.yaml").write_text("---\ncdiVersion: 0.3.0\nkind: vendor.com/gpu\n")
    assert store.list() == ["c1"]
    store.remove("c1")
    assert os.listdir(tmp_path) == []


def test_create_only(tmp_path: Path) -> None:
    store = TransientSpecs(str(tmp_path), "vendor.com", "gpu")
    store.write("c1", claim_spec("c1"), replace=False)
    store.write("c1", claim_spec("c1"), replace=False)
    with pytest.raises(SpecExistsError, match=r"vendor\.com-gpu_c1\.json: a different spec for this claim"):
        store.write("c1", claim_spec("c1", env="A=2"), replace=False)


def test_only_the_producers_kind_and_valid_specs_are_written(tmp_path: Path) -> None:
    store = TransientSpecs(str(tmp_path), "vendor.com", "gpu")
    with pytest.raises(CdictkError, match="kind: spec of kind"):
        store.write("c1", claim_spec("c1", kind="vendor.com/fpga"))
    with pytest.raises(CdictkError, match="invalid spec"):
        store.write("c1", claim_spec("c1", env="NOEQUALS"))
    assert os.listdir(tmp_path) == []


def test_gc_reads_the_kind_where_names_collide(tmp_path: Path) -> None:
    """vendor a-b with class c and vendor a with class b-c both name their files a-b-c_<id>."""
    ours, theirs = TransientSpecs(str(tmp_path), "a-b", "c"), TransientSpecs(str(tmp_path), "a", "b-c")
    ours.write("x", claim_spec("x", kind="a-b/c"))
    theirs.write("y", claim_spec("y", kind="a/b-c"))
    (tmp_path / "a-b-c_z.json").write_text("not a spec")
    assert ours.list() == ["x"] and theirs.list() == ["y"]
    assert ours.gc([]) == ["x"]
    assert sorted(os.listdir(tmp_path)) == ["a-b-c_y.json", "a-b-c_z.json"]


def test_write_and_remove_leave_a_colliding_producers_file_alone(tmp_path: Path) -> None:
    ours, theirs = (
        TransientSpecs(str(tmp_path), "vendor.com", "gpu"),
        TransientSpecs(str(tmp_path), "vendor.com", "gpu_x"),
    )
    theirs.write("y", claim_spec("y", kind="vendor.com/gpu_x"))  # vendor.com-gpu_x_y.json
    with pytest.raises(CdictkError, match="another producer's, left alone"):
        ours.write("x_y", claim_spec("c1"))
    ours.remove("x_y")
    assert theirs.list() == ["y"]


def test_gc_takes_dead_writers_temp_files(tmp_path: Path) -> None:
    store = TransientSpecs(str(tmp_path), "vendor.com", "gpu")
    (tmp_path / ".vendor.com-gpu_c1.json.0123456789ab.tmp").write_text("half")
    (tmp_path / ".vendor.com-fpga_c1.json.0123456789ab.tmp").write_text("someone else's")
    store.gc([])
    assert os.listdir(tmp_path) == [".vendor.com-fpga_c1.json.0123456789ab.tmp"]


@pytest.mark.root
def test_a_spec_dir_that_others_could_change_is_refused(root_dir: Path) -> None:
    real = root_dir / "real"
    real.mkdir(mode=0o755)
    (root_dir / "link").symlink_to(real)
    with pytest.raises(SpecDirError, match="link: is a symlink"):
        TransientSpecs(str(root_dir / "link")).remove("c1")
    real.chmod(0o775)
    with pytest.raises(SpecDirError, match=r"writable by others \(mode 0775\)"):
        TransientSpecs(str(real)).list()
    real.chmod(0o755)
    os.chown(real, 1000, 1000)
    with pytest.raises(SpecDirError, match="owned by uid 1000"):
        TransientSpecs(str(real)).gc([])
