"""Claims prepared and unprepared on the fake eight-GPU node (GPU 0 in MIG mode): each claim's spec
named as NVIDIA's driver names it, the checkpoint kept in step, the same claim answered the same,
a device prepared twice refused, and what a restart or reboot finds cleaned up."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from cdictk.api import CdictkError, NodeSpecs, Spec, TransientSpecs
from cdictk.cdi.load import load_spec
from cdictk.dra import cdinames
from cdictk.dra.checkpoint import (
    COMPLETED,
    STARTED,
    Checkpoint,
    CheckpointError,
    PreparedClaim,
    PreparedDevice,
)
from cdictk.dra.preparer import Prepared, Preparer
from tests.conftest import require_node_tools
from tests.fakenode.node import FakeNode, build_node, mig_cap_minor
from tests.rootmarker import root_only

pytestmark = pytest.mark.root

DRIVER = "gpu.nvidia.com"
POOL = "node1"
BOOT = "5d0c4a8e-2b1f-4c3d-9e8f-7a6b5c4d3e2f"
A = "aaaaaaaa-7c1e-4b6a-9d5e-2f6c0e4a1b23"
B = "bbbbbbbb-7c1e-4b6a-9d5e-2f6c0e4a1b23"
C = "cccccccc-7c1e-4b6a-9d5e-2f6c0e4a1b23"
MIG = "gpu-0-mig-1g10gb-19-4"  # MIG device 0:1 of the fake node
SHARE = "7f0c3b1e-1d2a-4e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture(scope="module")
@root_only
def node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> FakeNode:
    require_node_tools()
    return build_node(str(tmp_path_factory.mktemp("preparer") / "node"), "eight", stub_cache)


@pytest.fixture(scope="module")
def specs(node: FakeNode) -> NodeSpecs:
    return NodeSpecs(
        node.root,
        proc_root=node.proc,
        sys_root=node.sys,
        vendor=cdinames.VENDOR,
        device_class=cdinames.DEVICE_CLASS,
    )


class Plugin:
    """A plugin's directories: where its checkpoint and the claims' specs are, and the boot it is in."""

    def __init__(self, tmp_path: Path, specs: NodeSpecs) -> None:
        self.node = specs
        self.proc = tmp_path / "proc"
        self.dir = tmp_path / "plugins" / DRIVER
        self.dir.mkdir(parents=True, mode=0o750)
        self.spec_dir = tmp_path / "run" / "cdi"
        self.boot(BOOT)

    def boot(self, boot_id: str) -> None:
        path = self.proc / "sys/kernel/random/boot_id"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(boot_id + "\n")

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(str(self.dir), proc_root=str(self.proc))

    def store(self) -> TransientSpecs:
        return cdinames.claim_specs(str(self.spec_dir))

    def start(self) -> Preparer:
        """A new process's preparer on the same files."""
        return Preparer(
            driver=DRIVER, pool=POOL, node=self.node, specs=self.store(), checkpoint=self.checkpoint()
        )

    def spec(self, uid: str) -> Spec:
        return load_spec(self.store().path(uid))

    def spec_files(self) -> list[str]:
        return sorted(os.listdir(self.spec_dir)) if self.spec_dir.exists() else []


@pytest.fixture
def plugin(tmp_path: Path, specs: NodeSpecs) -> Plugin:
    return Plugin(tmp_path, specs)


def result(device: str, request: str = "gpu", **more: Any) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": POOL, "device": device, **more}


def claim(uid: str, name: str, *results: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    found = {
        "metadata": {"namespace": "team", "name": name, "uid": uid},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }
    return ("team", name, uid, found)


def cdi_id(uid: str, device: str) -> str:
    return f"k8s.gpu.nvidia.com/claim={uid}-{device}"


def one(preparer: Preparer, uid: str, name: str, *results: dict[str, Any]) -> Prepared:
    return preparer.prepare([claim(uid, name, *results)])[uid]


def test_a_whole_gpu_is_its_node_spec_device_named_as_in_the_slice(plugin: Plugin, specs: NodeSpecs) -> None:
    answer = one(plugin.start(), A, "a", result("gpu-1"))
    assert answer == Prepared((PreparedDevice(("gpu",), POOL, "gpu-1", (cdi_id(A, "gpu-1"),)),))
    assert plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{A}.json"]
    spec = plugin.spec(A)
    assert spec.kind == "k8s.gpu.nvidia.com/claim"
    (device,) = spec.devices
    assert device.name == f"{A}-gpu-1"
    assert device.container_edits == specs.device_edits("1")
    assert spec.container_edits == specs.common_edits()
    assert plugin.checkpoint().load() == {A: PreparedClaim("team", "a", COMPLETED, answer.devices)}


def test_a_mig_device_carries_its_capability_nodes(plugin: Plugin, node: FakeNode, specs: NodeSpecs) -> None:
    answer = one(plugin.start(), A, "a", result(MIG, request="small"))
    assert [device.cdi_device_ids for device in answer.devices] == [(cdi_id(A, MIG),)]
    (device,) = plugin.spec(A).devices
    assert device.name == f"{A}-{MIG}"
    assert device.container_edits == specs.device_edits("0:1")
    mig = node.preset.migs[1]
    assert [n.path for n in device.container_edits.device_nodes] == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{mig_cap_minor(0, mig.gi)}",
        f"/dev/nvidia-caps/nvidia-cap{mig_cap_minor(0, mig.gi, mig.ci)}",
    ]


def test_two_devices_of_one_claim_are_two_answers_in_one_spec(plugin: Plugin) -> None:
    answer = one(
        plugin.start(), A, "a", result("gpu-2", request="first/large"), result("gpu-3", request="second")
    )
    assert [(d.request_names, d.device, d.cdi_device_ids) for d in answer.devices] == [
        (("first",), "gpu-2", (cdi_id(A, "gpu-2"),)),
        (("second",), "gpu-3", (cdi_id(A, "gpu-3"),)),
    ]
    assert [device.name for device in plugin.spec(A).devices] == [f"{A}-gpu-2", f"{A}-gpu-3"]


def test_the_same_claim_twice_answers_the_same_and_leaves_its_spec(plugin: Plugin) -> None:
    preparer = plugin.start()
    first = one(preparer, A, "a", result("gpu-1"))
    path = plugin.store().path(A)
    before = os.stat(path)
    assert one(preparer, A, "a", result("gpu-1")) == first
    assert os.stat(path).st_ino == before.st_ino  # not written again: runtimes watching see no change
    assert one(plugin.start(), A, "a", result("gpu-1")) == first  # and after a restart


def test_a_lost_spec_is_written_again_when_prepared_again(plugin: Plugin) -> None:
    preparer = plugin.start()
    first = one(preparer, A, "a", result("gpu-1"), result(MIG))
    written = Path(plugin.store().path(A)).read_bytes()
    os.unlink(plugin.store().path(A))  # /var/run/cdi is a tmpfs
    assert one(preparer, A, "a", result("gpu-1"), result(MIG)) == first
    assert Path(plugin.store().path(A)).read_bytes() == written


def test_a_device_prepared_for_another_claim_is_refused_and_the_others_go_on(plugin: Plugin) -> None:
    preparer = plugin.start()
    one(preparer, A, "a", result("gpu-1"))
    answers = preparer.prepare(
        [claim(B, "b", result("gpu-2"), result("gpu-1")), claim(C, "c", result("gpu-3"))]
    )
    assert answers[B] == Prepared(error="claim team/b: device gpu-1 is already prepared for claim team/a")
    assert answers[C].devices[0].device == "gpu-3"
    assert plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{uid}.json" for uid in (A, C)]
    assert sorted(plugin.checkpoint().load()) == [A, C]


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        ({"shareID": SHARE}, {"shareID": SHARE}, True),
        ({}, {"adminAccess": True}, True),
        ({"adminAccess": True}, {}, True),
        ({"shareID": SHARE}, {"shareID": "0b1c2d3e-0000-4000-8000-000000000000"}, False),
        ({"shareID": SHARE}, {}, False),
    ],
)
def test_a_shared_or_admin_device_may_be_in_two_claims(
    plugin: Plugin, first: dict[str, Any], second: dict[str, Any], shared: bool
) -> None:
    preparer = plugin.start()
    assert one(preparer, A, "a", result("gpu-1", **first)).error is None
    answer = one(preparer, B, "b", result("gpu-1", **second))
    assert (answer.error is None) == shared
    if shared:
        assert answer.devices[0].cdi_device_ids == (cdi_id(B, "gpu-1"),)


def test_other_drivers_results_are_ignored_and_a_claim_of_none_is_answered(plugin: Plugin) -> None:
    nic = {"request": "nic", "driver": "nic.example.com", "pool": "elsewhere", "device": "eth0"}
    preparer = plugin.start()
    assert one(preparer, A, "a", nic, result("gpu-1")).devices[0].device == "gpu-1"
    assert one(preparer, B, "b", nic) == Prepared(())
    assert plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{A}.json"]
    assert sorted(plugin.checkpoint().load()) == [A]


def test_another_pool_a_replaced_claim_and_an_unknown_device_are_refused(plugin: Plugin) -> None:
    preparer = plugin.start()
    answers = preparer.prepare(
        [
            claim(A, "a", result("gpu-1", pool="node2")),
            ("team", "b", B, claim(C, "b", result("gpu-2"))[3]),
            claim(C, "c", result("gpu-0")),  # GPU 0 is in MIG mode: no device itself
        ]
    )
    assert (
        answers[A].error
        == "claim team/a: device gpu-1 of request gpu is allocated to another node's pool node2"
    )
    assert (answers[B].error or "").startswith("claim team/b: got replaced")
    assert answers[C].error == "claim team/c: device gpu-0 of request gpu is not a device of this node"
    assert plugin.spec_files() == [] and plugin.checkpoint().load() == {}


def test_a_failed_spec_write_leaves_neither_spec_nor_entry(
    plugin: Plugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    preparer = plugin.start()

    def refuse(*_: object, **__: object) -> list[str]:
        raise CdictkError("", "", "no space left")

    monkeypatch.setattr(TransientSpecs, "write", refuse)
    assert one(preparer, A, "a", result("gpu-1")) == Prepared(error="no space left")
    assert plugin.spec_files() == [] and plugin.checkpoint().load() == {}
    monkeypatch.undo()
    assert one(preparer, A, "a", result("gpu-1")).error is None


def test_a_prepare_cut_short_is_rolled_back_then_done(plugin: Plugin) -> None:
    half = (PreparedDevice(("gpu",), POOL, "gpu-5", (cdi_id(A, "gpu-5"),)),)
    plugin.checkpoint().save({A: PreparedClaim("team", "a", STARTED, half)})
    preparer = plugin.start()
    answer = one(preparer, A, "a", result("gpu-1"))
    assert [device.device for device in answer.devices] == ["gpu-1"]
    assert plugin.checkpoint().load()[A].state == COMPLETED


def test_a_prepare_cut_short_and_now_refused_leaves_nothing(plugin: Plugin) -> None:
    preparer = plugin.start()
    one(preparer, A, "a", result("gpu-1"))
    one(preparer, B, "b", result("gpu-2"))
    entries = plugin.checkpoint().load()
    plugin.checkpoint().save({A: entries[A], B: PreparedClaim("team", "b", STARTED, entries[B].devices)})
    answer = one(plugin.start(), B, "b", result("gpu-1"))  # its allocation now names A's device
    assert answer.error == "claim team/b: device gpu-1 is already prepared for claim team/a"
    assert plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{A}.json"]
    assert sorted(plugin.checkpoint().load()) == [A]


def test_calls_from_threads_are_serialized(plugin: Plugin) -> None:
    """Two claims given one device at once: one gets it, the other is refused, whichever comes first."""
    preparer = plugin.start()
    answers: dict[str, Prepared] = {}

    def prepare(uid: str, name: str) -> None:
        answers.update(preparer.prepare([claim(uid, name, result("gpu-4"))]))

    threads = [threading.Thread(target=prepare, args=args) for args in ((A, "a"), (B, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refused = [uid for uid, answer in answers.items() if answer.error]
    assert len(refused) == 1 and "device gpu-4 is already prepared for claim team/" in str(
        answers[refused[0]].error
    )
    (kept,) = plugin.checkpoint().load()
    assert kept != refused[0] and plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{kept}.json"]


def test_a_restart_between_prepare_and_unprepare_still_unprepares(plugin: Plugin) -> None:
    one(plugin.start(), A, "a", result("gpu-1"))
    one(plugin.start(), B, "b", result("gpu-2"))
    later = plugin.start()
    assert later.unprepare([("team", "a", A), ("team", "x", C)]) == {A: None, C: None}  # C: never prepared
    assert plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{B}.json"]
    assert sorted(plugin.checkpoint().load()) == [B]
    assert later.unprepare([("team", "a", A)]) == {A: None}  # the kubelet repeats


def test_cleanup_rolls_back_started_claims_and_removes_orphan_specs(plugin: Plugin) -> None:
    preparer = plugin.start()
    one(preparer, A, "a", result("gpu-1"))
    one(preparer, B, "b", result("gpu-2"))
    entries = plugin.checkpoint().load()
    plugin.checkpoint().save({A: entries[A], B: PreparedClaim("team", "b", STARTED, entries[B].devices)})
    orphan = Path(plugin.store().path(B)).read_text().replace(B, C)
    Path(plugin.store().path(C)).write_text(orphan)  # a spec the checkpoint does not know
    restarted = plugin.start()
    assert restarted.cleanup() == [B, C]
    assert plugin.spec_files() == [f"k8s.gpu.nvidia.com-claim_{A}.json"]
    assert sorted(plugin.checkpoint().load()) == [A] == sorted(restarted.prepared())


def test_a_reboot_empties_the_checkpoint_and_cleanup_the_spec_dir(plugin: Plugin) -> None:
    one(plugin.start(), A, "a", result("gpu-1"))
    plugin.boot("9a8b7c6d-0000-4000-8000-000000000001")
    rebooted = plugin.start()
    assert rebooted.prepared() == {}
    assert rebooted.cleanup() == [A]  # a spec dir that is no tmpfs kept it
    assert plugin.spec_files() == []
    assert json.loads((plugin.dir / "checkpoint.json").read_text())["bootID"].startswith("9a8b7c6d")
    assert one(rebooted, B, "b", result("gpu-1")).error is None  # gpu-1 is free again


def test_a_corrupt_checkpoint_stops_the_start_in_one_line(plugin: Plugin) -> None:
    one(plugin.start(), A, "a", result("gpu-1"))
    path = plugin.dir / "checkpoint.json"
    path.write_text(path.read_text().replace("gpu-1", "gpu-2"))
    with pytest.raises(CheckpointError) as error:
        plugin.start()
    assert str(error.value) == f"{path}: checksum mismatch: the file was changed or cut short"


def test_the_node_specs_must_be_of_the_claims_kind(plugin: Plugin, node: FakeNode) -> None:
    other = NodeSpecs(node.root, proc_root=node.proc, sys_root=node.sys)
    with pytest.raises(CdictkError, match=re.escape('kind: the node\'s specs are of "nvidia.com/gpu"')):
        Preparer(driver=DRIVER, pool=POOL, node=other, specs=plugin.store(), checkpoint=plugin.checkpoint())
