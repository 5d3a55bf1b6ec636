"""cdictk.api on the fake eight-GPU node: claims, transient specs, the consumer cache and the helpers.

GPU 0 of the node is in MIG mode with three MIG devices (0:0, 0:1, 0:2); GPUs 1 to 7 are full GPUs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cdictk.nvcdi.nodespec
from cdictk import api
from cdictk.api import (
    CdictkError,
    InvalidNameError,
    InvalidSpecError,
    NodeSpecs,
    SpecDirError,
    SpecDirs,
    SpecExistsError,
    TransientSpecs,
    UnknownDeviceError,
    UnresolvedDevicesError,
)
from cdictk.cli.main import main
from tests.conftest import require_node_tools
from tests.fakenode.node import FakeNode, build_node, mig_cap_minor
from tests.rootmarker import root_only

CLAIM = "8f6c1b2e-3a4d-4e5f-9a0b-1c2d3e4f5a6b"
CONFIG: dict[str, Any] = {"ociVersion": "1.2.0", "process": {"cwd": "/", "env": ["PATH=/bin"]}}


@pytest.fixture(scope="module")
@root_only
def node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> FakeNode:
    require_node_tools()
    return build_node(str(tmp_path_factory.mktemp("api") / "node"), "eight", stub_cache)


@pytest.fixture(scope="module")
def specs(node: FakeNode) -> NodeSpecs:
    return NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys)


@pytest.fixture
def spec_dir(tmp_path: Path) -> str:
    return str(tmp_path / "run" / "cdi")


@pytest.fixture
def cache(spec_dir: str) -> Iterator[SpecDirs]:
    os.makedirs(spec_dir, exist_ok=True)
    made = SpecDirs([spec_dir])
    yield made
    made.close()


# --- NodeSpecs ---------------------------------------------------------------------------------------


def node_paths(edits: api.ContainerEdits) -> list[str]:
    return [node.path for node in edits.device_nodes]


@pytest.mark.root
def test_device_edits_by_index_and_by_uuid_are_the_same(specs: NodeSpecs, node: FakeNode) -> None:
    by_index = specs.device_edits("1")
    assert by_index == specs.device_edits(node.preset.gpus[1].uuid)
    assert node_paths(by_index)[0] == "/dev/nvidia1"


@pytest.mark.root
def test_a_mig_device_carries_its_parent_and_its_capability_nodes(specs: NodeSpecs, node: FakeNode) -> None:
    mig = node.preset.migs[1]
    edits = specs.device_edits("0:1")
    assert edits == specs.device_edits(mig.uuid)
    assert node_paths(edits) == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{mig_cap_minor(0, mig.gi)}",
        f"/dev/nvidia-caps/nvidia-cap{mig_cap_minor(0, mig.gi, mig.ci)}",
    ]


@pytest.mark.root
def test_a_gpu_in_mig_mode_and_an_unknown_id_are_refused(specs: NodeSpecs) -> None:
    with pytest.raises(UnknownDeviceError, match=r"GPU 0 is in MIG mode \(its MIG devices: 0:0, 0:1, 0:2\)"):
        specs.device_edits("0")
    with pytest.raises(UnknownDeviceError, match="'9': no such GPU or MIG device on this node"):
        specs.claim_spec(CLAIM, ["1", "9"])


@pytest.mark.root
def test_common_edits_hold_the_driver_and_answers_are_copies(specs: NodeSpecs) -> None:
    common = specs.common_edits()
    assert "NVIDIA_VISIBLE_DEVICES=void" in common.env
    assert "/dev/nvidiactl" in node_paths(common)
    assert any(mount.container_path.endswith(".so.580.95.05") for mount in common.mounts)
    common.env.clear()
    specs.device_edits("1").device_nodes.clear()
    assert specs.common_edits().env and specs.device_edits("1").device_nodes


@pytest.mark.root
def test_a_claim_spec_names_its_devices_after_the_claim(specs: NodeSpecs) -> None:
    spec = specs.claim_spec(CLAIM, ["1", "0:2", "1"])
    assert spec.kind == "nvidia.com/gpu"
    assert [device.name for device in spec.devices] == [f"{CLAIM}-1", f"{CLAIM}-0:2"]
    assert spec.container_edits == specs.common_edits()
    assert spec.devices[1].container_edits == specs.device_edits("0:2")
    assert spec.cdi_version == api.minimum_version(spec)
    api.validate(spec)


@pytest.mark.root
def test_a_claim_spec_names_devices_as_the_caller_names_them(specs: NodeSpecs, node: FakeNode) -> None:
    """A DRA driver finds a device by its UUID and names it as its ResourceSlice does; an id without a
    name keeps its own, and two ids named alike are refused."""
    gpu = node.preset.gpus[1].uuid
    spec = specs.claim_spec(CLAIM, [gpu, "0:2"], names={gpu: "gpu-1", "7": "gpu-7"})
    assert [device.name for device in spec.devices] == [f"{CLAIM}-gpu-1", f"{CLAIM}-0:2"]
    assert spec.devices[0].container_edits == specs.device_edits("1")
    with pytest.raises(CdictkError, match=f"^names: '1' and '2' would both be device '{CLAIM}-gpu-x'$"):
        specs.claim_spec(CLAIM, ["1", "2"], names={"1": "gpu-x", "2": "gpu-x"})
    with pytest.raises(CdictkError, match=r"^names: invalid device name"):
        specs.claim_spec(CLAIM, ["1"], names={"1": "gpu/1"})


@pytest.mark.root
def test_a_whole_spec_has_every_device_and_all(specs: NodeSpecs, node: FakeNode) -> None:
    names = [device.name for device in specs.spec().devices]
    assert names[-1] == "all"
    assert {"0:0", "0:1", "0:2", "7", node.preset.gpus[7].uuid} <= set(names)
    assert [device.name for device in specs.spec(["2"]).devices] == ["2", node.preset.gpus[2].uuid, "all"]


@pytest.mark.root
def test_specs_fit_an_older_reader_when_asked(node: FakeNode) -> None:
    old = NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys, cdi_version="0.5.0")
    assert specs_version(old.claim_spec(CLAIM, ["1", "0:1"])) == "0.5.0"
    assert specs_version(old.spec()) == "0.5.0"
    assert any("cdiVersion 0.5.0 has no additionalGids" in warning for warning in old.warnings())


@pytest.mark.root
def test_a_producer_that_sees_the_node_elsewhere_writes_the_nodes_paths(node: FakeNode) -> None:
    seen_at = NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys, host_root=node.root)
    spec = seen_at.claim_spec(CLAIM, ["1"])
    paths = [mount.host_path for mount in spec.container_edits.mounts]
    paths += [n.host_path or n.path for d in spec.devices for n in d.container_edits.device_nodes]
    assert "/dev/nvidia1" in paths
    assert not [path for path in paths if path.startswith(node.root)]


def specs_version(spec: api.Spec) -> str:
    api.validate(spec)
    assert not spec.container_edits.additional_gids
    return spec.cdi_version


@pytest.mark.root
def test_discovery_is_kept_until_max_age_or_refresh(node: FakeNode, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = cdictk.nvcdi.nodespec.node_spec

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("cdictk.nvcdi.claims.node_spec", counting)
    now = [0.0]
    specs = NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys, max_age=60, clock=lambda: now[0])
    specs.claim_spec(CLAIM, ["1"])
    specs.common_edits()
    now[0] = 59.0
    specs.device_edits("2")
    assert len(calls) == 1
    now[0] = 60.0
    specs.device_edits("2")
    assert len(calls) == 2
    specs.refresh()
    assert len(calls) == 3


@pytest.mark.root
def test_a_bad_kind_or_claim_uid_is_refused(specs: NodeSpecs, node: FakeNode) -> None:
    with pytest.raises(CdictkError, match='class: invalid class "gpu=": must end with a letter or digit'):
        NodeSpecs(node.root, device_class="gpu=")
    with pytest.raises(CdictkError, match="claim uid: invalid device name"):
        specs.claim_spec("bad uid", ["1"])


# --- TransientSpecs ----------------------------------------------------------------------------------


@pytest.mark.root
def test_write_gives_the_names_for_the_kubelet_and_a_file_runtimes_read(
    specs: NodeSpecs, spec_dir: str, cache: SpecDirs
) -> None:
    store = TransientSpecs(spec_dir)
    names = store.write(CLAIM, specs.claim_spec(CLAIM, ["1", "0:1"]))
    assert names == [f"nvidia.com/gpu={CLAIM}-1", f"nvidia.com/gpu={CLAIM}-0:1"]
    path = os.path.join(spec_dir, api.transient_spec_name("nvidia.com", "gpu", CLAIM) + ".json")
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert json.loads(Path(path).read_text())["kind"] == "nvidia.com/gpu"
    assert cache.devices() == sorted(names)
    assert cache.errors() == []
    assert store.list() == [CLAIM]


@pytest.mark.root
def test_remove_is_idempotent(specs: NodeSpecs, spec_dir: str) -> None:
    store = TransientSpecs(spec_dir)
    store.write(CLAIM, specs.claim_spec(CLAIM, ["1"]))
    store.remove(CLAIM)
    store.remove(CLAIM)
    TransientSpecs(os.path.join(spec_dir, "never-made")).remove(CLAIM)
    assert os.listdir(spec_dir) == []


@pytest.mark.root
def test_a_create_only_write_accepts_a_retry_and_refuses_another_spec(
    specs: NodeSpecs, spec_dir: str
) -> None:
    store = TransientSpecs(spec_dir)
    store.write(CLAIM, specs.claim_spec(CLAIM, ["1"]), replace=False)
    store.write(CLAIM, specs.claim_spec(CLAIM, ["1"]), replace=False)  # the kubelet retried the prepare
    with pytest.raises(SpecExistsError, match="a different spec for this claim exists already"):
        store.write(CLAIM, specs.claim_spec(CLAIM, ["2"]), replace=False)
    store.write(CLAIM, specs.claim_spec(CLAIM, ["2"]))
    assert len(os.listdir(spec_dir)) == 1


@pytest.mark.root
def test_a_spec_of_another_kind_or_an_invalid_one_is_not_written(specs: NodeSpecs, spec_dir: str) -> None:
    with pytest.raises(
        CdictkError, match=re.escape('spec of kind "nvidia.com/gpu" given to the producer of "x.com/y"')
    ):
        TransientSpecs(spec_dir, "x.com", "y").write(CLAIM, specs.claim_spec(CLAIM, ["1"]))
    spec = specs.claim_spec(CLAIM, ["1"])
    spec.devices[0].container_edits.env = ["NOEQUALS"]
    with pytest.raises(CdictkError, match="invalid spec"):
        TransientSpecs(spec_dir).write(CLAIM, spec)
    assert not os.path.exists(spec_dir) or os.listdir(spec_dir) == []


@pytest.mark.root
def test_gc_removes_stale_claims_of_this_producer_only(specs: NodeSpecs, spec_dir: str) -> None:
    gpus, migs = TransientSpecs(spec_dir), TransientSpecs(spec_dir, "nvidia.com", "mig")
    for claim in ("a", "b", "c"):
        gpus.write(claim, specs.claim_spec(claim, ["1"]))
    mig_spec = specs.claim_spec("a", ["0:0"])
    mig_spec.kind = "nvidia.com/mig"
    migs.write("a", mig_spec)
    # Another producer whose file names start with our prefix: class "gpu_x" (claim "d" and "e").
    (Path(spec_dir) / "nvidia.com-gpu_x_d.yaml").write_text("cdiVersion: 0.3.0\nkind: nvidia.com/gpu_x\n")
    other = specs.claim_spec("e", ["2"])
    other.kind = "nvidia.com/gpu_x"
    TransientSpecs(spec_dir, "nvidia.com", "gpu_x").write("e", other)
    (Path(spec_dir) / "unrelated.json").write_text("{}")
    assert gpus.gc(["b"]) == ["a", "c"]
    assert sorted(os.listdir(spec_dir)) == [
        "nvidia.com-gpu_b.json",
        "nvidia.com-gpu_x_d.yaml",
        "nvidia.com-gpu_x_e.json",
        "nvidia.com-mig_a.json",
        "unrelated.json",
    ]
    assert gpus.list() == ["b"] and migs.list() == ["a"]
    assert gpus.gc(["b"]) == []


@pytest.mark.root
def test_two_producers_side_by_side_in_one_cache(specs: NodeSpecs, spec_dir: str, cache: SpecDirs) -> None:
    gpus, migs = TransientSpecs(spec_dir), TransientSpecs(spec_dir, "nvidia.com", "mig")
    mig_spec = specs.claim_spec(CLAIM, ["0:0"])
    mig_spec.kind = "nvidia.com/mig"
    names = gpus.write(CLAIM, specs.claim_spec(CLAIM, ["1"])) + migs.write(CLAIM, mig_spec)
    assert cache.devices() == sorted(names)
    gpus.remove(CLAIM)
    assert cache.devices() == [f"nvidia.com/mig={CLAIM}-0:0"]


@pytest.mark.root
def test_a_symlinked_world_writable_or_foreign_spec_dir_is_refused(
    specs: NodeSpecs, tmp_path: Path, root_dir: Path
) -> None:
    spec = specs.claim_spec(CLAIM, ["1"])
    real = root_dir / "real"
    real.mkdir(mode=0o755)
    (root_dir / "link").symlink_to(real)
    with pytest.raises(SpecDirError, match="is a symlink; refusing to write specs through it"):
        TransientSpecs(str(root_dir / "link")).write(CLAIM, spec)
    real.chmod(0o777)
    with pytest.raises(SpecDirError, match=r"writable by others \(mode 0777\)"):
        TransientSpecs(str(real)).write(CLAIM, spec)
    real.chmod(0o755)
    os.chown(real, 1000, 1000)
    with pytest.raises(SpecDirError, match="owned by uid 1000, not by root or us"):
        TransientSpecs(str(real)).gc([])
    os.chown(real, 0, 0)
    (root_dir / "open").mkdir(mode=0o755)
    (root_dir / "open").chmod(0o777)
    with pytest.raises(SpecDirError, match=r"not written: .*/open: writable by group or others"):
        TransientSpecs(str(root_dir / "open" / "cdi")).write(CLAIM, spec)
    assert os.listdir(root_dir / "open") == []  # nothing is made under a directory others can change
    assert os.listdir(real) == []


@pytest.mark.root
def test_a_reader_never_sees_half_a_spec(specs: NodeSpecs, spec_dir: str) -> None:
    store = TransientSpecs(spec_dir)
    small = specs.claim_spec(CLAIM, ["1"])
    large = specs.claim_spec(CLAIM, ["1", "2", "3", "4", "5", "6", "7", "0:0", "0:1", "0:2"])
    store.write(CLAIM, small)
    path = store.path(CLAIM)
    done = threading.Event()

    def writer() -> None:
        for round_ in range(200):
            store.write(CLAIM, large if round_ % 2 else small)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    while not done.is_set():
        seen.add(len(json.loads(Path(path).read_bytes())["devices"]))  # a torn file fails to parse
    thread.join()
    assert seen <= {1, 10}


@pytest.mark.root
def test_threads_share_one_node_specs_and_one_store(specs: NodeSpecs, spec_dir: str) -> None:
    store = TransientSpecs(spec_dir)
    failures: list[BaseException] = []

    def prepare(worker: int) -> None:
        try:
            for n in range(20):
                claim = f"w{worker}-{n}"
                store.write(claim, specs.claim_spec(claim, [str(1 + n % 7)]))
        except BaseException as exc:  # reported by the assert below
            failures.append(exc)

    threads = [threading.Thread(target=prepare, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(store.list()) == 80
    assert store.gc([]) == sorted(f"w{w}-{n}" for w in range(4) for n in range(20))


# --- SpecDirs ---------------------------------------------------------------------------------------


@pytest.mark.root
def test_the_cache_sees_new_changed_and_removed_specs_and_rereads_only_those(
    specs: NodeSpecs, spec_dir: str, cache: SpecDirs
) -> None:
    store = TransientSpecs(spec_dir)
    for claim in ("a", "b", "c"):
        store.write(claim, specs.claim_spec(claim, ["1"]))
    assert cache.devices() == ["nvidia.com/gpu=a-1", "nvidia.com/gpu=b-1", "nvidia.com/gpu=c-1"]
    reads = cache.reads
    store.write("b", specs.claim_spec("b", ["1", "2"]))
    assert "nvidia.com/gpu=b-2" in cache.devices()
    assert cache.reads == reads + 1
    store.remove("a")
    assert cache.devices() == ["nvidia.com/gpu=b-1", "nvidia.com/gpu=b-2", "nvidia.com/gpu=c-1"]
    assert cache.reads == reads + 1
    cache.devices()
    assert cache.reads == reads + 1  # nothing changed: nothing read


@pytest.mark.root
def test_a_spec_dir_made_after_the_cache_is_watched(specs: NodeSpecs, tmp_path: Path) -> None:
    later = str(tmp_path / "later")
    cache = SpecDirs([later])
    assert cache.devices() == []
    TransientSpecs(later).write(CLAIM, specs.claim_spec(CLAIM, ["1"]))
    assert cache.devices() == [f"nvidia.com/gpu={CLAIM}-1"]
    cache.close()
    with pytest.raises(api.ClosedError, match="the spec dirs' view is closed"):
        cache.devices()


@pytest.mark.root
def test_without_auto_refresh_only_refresh_rescans(specs: NodeSpecs, spec_dir: str) -> None:
    os.makedirs(spec_dir)
    cache = SpecDirs([spec_dir], auto_refresh=False)
    TransientSpecs(spec_dir).write(CLAIM, specs.claim_spec(CLAIM, ["1"]))
    assert cache.devices() == []
    cache.refresh()
    assert cache.devices() == [f"nvidia.com/gpu={CLAIM}-1"]


@pytest.mark.root
def test_inject_is_cdi_inject(specs: NodeSpecs, spec_dir: str, cache: SpecDirs, tmp_path: Path) -> None:
    names = TransientSpecs(spec_dir).write(CLAIM, specs.claim_spec(CLAIM, ["1", "0:1"]))
    injected = cache.inject(CONFIG, names)
    assert CONFIG["process"]["env"] == ["PATH=/bin"]  # the input is left alone
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    device_args = [arg for name in names for arg in ("--device", name)]
    assert main(["cdi", "inject", *device_args, "--spec-dir", spec_dir, str(path)]) == 0
    assert injected == json.loads(path.read_text())
    assert "/dev/nvidia-caps/nvidia-cap" in json.dumps(injected["linux"]["devices"])


@pytest.mark.root
def test_inject_is_all_or_nothing(specs: NodeSpecs, spec_dir: str, cache: SpecDirs) -> None:
    names = TransientSpecs(spec_dir).write(CLAIM, specs.claim_spec(CLAIM, ["1"]))
    with pytest.raises(
        UnresolvedDevicesError, match=re.escape("nvidia.com/gpu=nope: unresolvable CDI device")
    ):
        cache.inject(CONFIG, [*names, "nvidia.com/gpu=nope"])
    with pytest.raises(CdictkError, match="not a qualified CDI device name"):
        cache.inject(CONFIG, ["gpu0"])


# --- helpers -----------------------------------------------------------------------------------------


def test_qualified_names_both_ways() -> None:
    assert api.qualified_name("nvidia.com", "gpu", "0:1") == "nvidia.com/gpu=0:1"
    parsed = api.parse_qualified_name("nvidia.com/gpu=MIG-1")
    assert (parsed.vendor, parsed.cls, parsed.name) == ("nvidia.com", "gpu", "MIG-1")
    with pytest.raises(InvalidNameError, match='invalid device name "-x": must start with a letter or digit'):
        api.qualified_name("nvidia.com", "gpu", "-x")
    with pytest.raises(ValueError, match="not a qualified CDI device name"):
        api.parse_qualified_name("/dev/nvidia0")
    assert api.check_kind("nvidia.com/gpu") == "nvidia.com/gpu"
    with pytest.raises(InvalidNameError, match='invalid kind "gpu": want vendor/class'):
        api.check_kind("gpu")
    with pytest.raises(
        InvalidNameError, match=re.escape('invalid vendor "1x.com": must start with a letter')
    ):
        api.check_kind("1x.com/gpu")


def test_transient_spec_name_is_the_librarys() -> None:
    assert api.transient_spec_name("nvidia.com", "gpu", "ns/claim") == "nvidia.com-gpu_ns_claim"
    with pytest.raises(CdictkError, match="vendor: empty vendor"):
        api.transient_spec_name("", "gpu", "x")


def test_annotations_both_ways() -> None:
    names = ["nvidia.com/gpu=1", "nvidia.com/gpu=0:1"]
    annotations = api.annotations_for("nvidia.gpu", CLAIM, names)
    assert annotations == {f"cdi.k8s.io/nvidia.gpu_{CLAIM}": ",".join(names)}
    assert api.devices_from_annotations({**annotations, "other": "x"}) == names
    assert api.devices_from_annotations({}) == []
    with pytest.raises(InvalidNameError, match="annotation value"):
        api.annotations_for("nvidia.gpu", "x", ["gpu0"])
    with pytest.raises(InvalidNameError, match=re.escape('annotation "cdi.k8s.io/x": " v.com/c=b": ')):
        api.devices_from_annotations({"cdi.k8s.io/x": "v.com/c=a, v.com/c=b"})  # not trimmed, as in Go


@pytest.mark.root
def test_validate_reports_every_problem_and_shows_the_first(specs: NodeSpecs) -> None:
    spec = specs.claim_spec(CLAIM, ["1"])
    spec.cdi_version = "0.3.0"  # the capability-free claim needs 0.5.0 for its host paths
    spec.devices[0].container_edits.env = ["BAD"]
    with pytest.raises(InvalidSpecError, match=r"\(and 1 more problems\)$") as raised:
        api.validate(spec)
    assert len(raised.value.problems) == 2


def test_every_exported_error_is_a_cdictk_error() -> None:
    errors = [getattr(api, name) for name in api.__all__ if name.endswith("Error")]
    assert len(errors) == 9
    assert all(issubclass(error, CdictkError) for error in errors)
    assert all(hasattr(api, name) for name in api.__all__)


@pytest.mark.parametrize(
    "record", [api.Spec, api.Device, api.ContainerEdits, api.DeviceNode, api.Mount, api.Hook]
)
def test_every_public_record_is_a_dataclass(record: type[Any]) -> None:
    made = record()
    assert dataclasses.is_dataclass(made) and not isinstance(made, type)
    assert list(dataclasses.asdict(made)) == [field.name for field in dataclasses.fields(made)]
    assert dataclasses.replace(made) == made


def test_the_models_records_are_changed_and_flattened_with_dataclasses() -> None:
    mount = api.Mount(host_path="/usr/lib/libcuda.so.1", container_path="/usr/lib/libcuda.so.1")
    device = api.Device(name="0", container_edits=api.ContainerEdits(mounts=[mount]))
    renamed = dataclasses.replace(device, name="1")
    assert renamed.name == "1" and renamed.container_edits is device.container_edits
    flat = dataclasses.asdict(renamed)
    assert flat["name"] == "1" and flat["container_edits"]["mounts"][0]["host_path"] == mount.host_path
