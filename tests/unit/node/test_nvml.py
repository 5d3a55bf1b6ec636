"""NVML through pynvml, asked in a forked child: the fake NVML's answers, its failures and hangs, a
query begun before it is asked, and answers of the wrong shape."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from cdictk.node.gpus import GpuInstance
from cdictk.node.nvml import NvmlQuery, query_nvml
from cdictk.node.nvmllib import NvmlError, nvml_library
from tests.conftest import NodeFactory

pytestmark = pytest.mark.root

V = "580.95.05"


def test_the_answer_is_frozen_data_made_after_the_fork(make_node: NodeFactory) -> None:
    node = make_node("eight")
    answer = query_nvml(f"{node.lib_dir}/libnvidia-ml.so.1")
    assert dataclasses.is_dataclass(answer)
    with pytest.raises(dataclasses.FrozenInstanceError):
        answer.version = "1"  # type: ignore[misc]
    # The query's module is imported before its child is forked: dataclasses would delay the fork.
    code = "import sys, cdictk.node.nvml; sys.exit('dataclasses' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=60).returncode == 0


def test_nvml_through_pynvml(make_node: NodeFactory) -> None:
    node = make_node("eight")
    library = nvml_library(node.root)
    assert library == f"{node.lib_dir}/libnvidia-ml.so.{V}"
    answer = query_nvml(library)
    version, gpus = answer.version, answer.gpus
    assert answer.left_out == []
    assert version == V and len(gpus) == 8
    first = gpus[0]
    assert first.mig_enabled and first.bus_id == "0000:18:00.0" and first.name == "NVIDIA H100 80GB HBM3"
    assert [(m.index, m.gi, m.ci, m.profile) for m in first.migs] == [
        (0, 2, 0, "3g.40gb"),
        (1, 7, 0, "1g.10gb"),
        (2, 8, 0, "1g.10gb"),
    ]
    assert not gpus[1].mig_enabled and gpus[1].migs == ()


def test_the_gpu_model_and_mig_placements(make_node: NodeFactory) -> None:
    node = make_node("eight")
    answer = query_nvml(nvml_library(node.root))
    assert answer.cuda_version == 13000
    first = answer.gpus[0]
    # NVML's numbers: an H100 is NVML_BRAND_NVIDIA (14) and NVML_DEVICE_ARCH_HOPPER (9).
    assert (first.brand, first.architecture, first.compute_capability) == (14, 9, (9, 0))
    assert first.memory_bytes == 81559 << 20 and first.memory_mib == 81559
    # Each MIG device's GPU instance: its profile's ID (not its index), its memory slices, and the
    # profile's sizes, which the fake takes from the MIG devices on it.
    assert [m.instance for m in first.migs] == [
        GpuInstance(9, 0, 4, 40192, 60, 3, 3, 0, 3, 0),
        GpuInstance(19, 4, 1, 9856, 16, 1, 1, 0, 1, 0),
        GpuInstance(19, 5, 1, 9856, 16, 1, 1, 0, 1, 0),
    ]


def test_nvml_failure_is_an_nvml_error(make_node: NodeFactory) -> None:
    node = make_node("single")
    config = node.nvml_config()
    config.init_error = 9
    node.write_nvml_config(config)
    with pytest.raises(NvmlError, match="nvmlInit failed: Driver Not Loaded"):
        query_nvml(f"{node.lib_dir}/libnvidia-ml.so.1")
    with pytest.raises(NvmlError, match=r"no-such-library\.so: No such file or directory") as missing:
        query_nvml(f"{node.lib_dir}/no-such-library.so")
    assert missing.value.absent


def test_a_query_under_way_is_killed_and_reaped_when_discovery_stops_without_it(
    make_node: NodeFactory,
) -> None:
    node = make_node("single")
    config = node.nvml_config()
    config.init_hang = True
    node.write_nvml_config(config)
    query = NvmlQuery(f"{node.lib_dir}/libnvidia-ml.so.1", deadline=30)
    pid = query._child._pid
    assert pid is not None
    started = time.monotonic()
    query.close()
    assert time.monotonic() - started < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left behind
    with pytest.raises(NvmlError, match="answered or closed already"):
        query.answer()


def test_a_query_begun_first_is_asked_later_and_answers_as_one_asked_at_once(make_node: NodeFactory) -> None:
    node = make_node("eight")
    library = f"{node.lib_dir}/libnvidia-ml.so.1"
    begun = NvmlQuery()
    time.sleep(0.05)  # the caller's own imports and looking, while the child loads pynvml
    begun.ask(library)
    with pytest.raises(NvmlError, match="asked already"):
        begun.ask(library)
    answer = begun.answer()
    assert answer.gpus == query_nvml(library).gpus and len(answer.gpus) == 8


@pytest.mark.parametrize(
    "answer",
    [[1, 2], {"version": "x"}, {"version": "x", "gpus": [{"bogus": 1}], "left_out": []}, {"gpus": 3}],
    ids=["a list", "no gpus", "a gpu of other fields", "gpus not a list"],
)
def test_an_answer_of_the_wrong_shape_is_a_failed_query_not_a_traceback(
    make_node: NodeFactory, monkeypatch: pytest.MonkeyPatch, answer: object
) -> None:
    from cdictk.node import nvml

    node = make_node("single")
    monkeypatch.setattr(nvml, "_answer", lambda _pynvml: answer)  # what the forked child runs
    with pytest.raises(
        NvmlError, match=r"an answer of the wrong shape|the child sent bytes that are no message"
    ):
        query_nvml(f"{node.lib_dir}/libnvidia-ml.so.1")
