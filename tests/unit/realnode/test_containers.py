"""realnode/containers.py: the containers' configs, their runs and deletes, and the verdict on what the GPU
script printed."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from realnode.containers import CONTAINER_PATH, Containers, oci_config, runtime_shim, settings_text, verdict
from realnode.nodefacts import Roots
from realnode.recorder import Recorder

GOOD = """probe: cuInit ok, 8 CUDA device(s), libcuda from /usr/lib/x86_64-linux-gnu/libcuda.so.1
probe-exit=0
cuda: 1 device(s), device 0: NVIDIA H200, vector add ok
cuda-exit=0
smi-path=/usr/bin/nvidia-smi
GPU 0: NVIDIA H200 (UUID: GPU-4a1b)
smi-exit=0
"""


def test_a_gpu_container_that_ran_all_three_passes_and_says_what_each_printed() -> None:
    found = verdict(GOOD, r"^GPU \d+: ")
    assert found.ok
    assert found.detail == (
        "probe: cuInit ok, 8 CUDA device(s), libcuda from /usr/lib/x86_64-linux-gnu/libcuda.so.1 | "
        "cuda: 1 device(s), device 0: NVIDIA H200, vector add ok | smi: GPU 0: NVIDIA H200 (UUID: GPU-4a1b)"
    )


def test_nvidia_smi_must_exit_0_and_print_the_line_expected() -> None:
    wrapper = GOOD.replace(
        "GPU 0: NVIDIA H200 (UUID: GPU-4a1b)\nsmi-exit=0",
        "exec: /usr/local/nvidia/bin/nvidia-smi: not found\nsmi-exit=127",
    )
    found = verdict(wrapper, r"^GPU \d+: ")
    assert not found.ok
    assert found.detail.startswith("failed: nvidia-smi | probe: cuInit ok")
    assert found.detail.endswith("smi: exec: /usr/local/nvidia/bin/nvidia-smi: not found")
    assert not verdict(GOOD, "^fake$").ok  # exit 0, but not the line asked for


def test_a_failing_program_and_a_script_that_never_ran_are_named() -> None:
    broken = GOOD.replace("probe-exit=0", "probe-exit=1").replace("cuda-exit=0", "cuda-exit=2")
    assert verdict(broken, r"^GPU \d+: ").detail.startswith("failed: probe, cuda | ")
    nothing = verdict("runc: exec /bin/sh: no such file\n", r"^GPU \d+: ")
    assert not nothing.ok
    assert nothing.detail == "failed: the script did not run, nvidia-smi | smi: (nothing)"


def test_the_cuda_program_is_judged_only_where_the_node_built_one() -> None:
    without = "\n".join(line for line in GOOD.splitlines() if not line.startswith("cuda"))
    assert verdict(without, r"^GPU \d+: ").ok


def test_a_config_is_non_interactive_with_the_rootfs_given_and_paths_for_any_image() -> None:
    config = oci_config("/checkdir/rootfs", ["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    assert config["root"] == {"path": "/checkdir/rootfs", "readonly": False}
    assert config["process"]["terminal"] is False and config["process"]["args"] == ["/bin/true"]
    assert config["process"]["env"] == [f"PATH={CONTAINER_PATH}", "TERM=xterm", "NVIDIA_VISIBLE_DEVICES=0"]
    assert CONTAINER_PATH.split(":")[0] == "/usr/local/nvidia/bin"  # where NVIDIA's spec puts nvidia-smi
    assert config["linux"]["resources"]["devices"] == [{"allow": False, "access": "rwm"}]


def test_the_shims_settings_name_the_checks_runc_and_spec_dir_and_a_fake_nodes_roots() -> None:
    live = tomllib.loads(settings_text("/checkdir/bin/runc", "/checkdir/cdi/cdictk", Roots()))
    assert live == {
        "runtime": {"runtimes": ["/checkdir/bin/runc"], "spec-dirs": ["/checkdir/cdi/cdictk"]},
        "requests": {"accept-env-unprivileged": True},
    }
    fake = tomllib.loads(settings_text("/r", "/s", Roots("/n", "/n", "/n/proc", "/n/sys")))
    assert fake["node"] == {
        "driver-root": "/n",
        "dev-root": "/n",
        "proc-root": "/n/proc",
        "sys-root": "/n/sys",
    }


def test_the_node_runtimes_shim_and_prestart_hook_are_its_stable_paths_with_private_settings(
    tmp_path: Path,
) -> None:
    found = runtime_shim(
        "/w/opt-cdictk", runc="/w/bin/runc", spec_dir="/w/cdi/runtime", roots=Roots(), work=str(tmp_path)
    )
    assert found.runtime == ["/w/opt-cdictk/bin/cdictk-runtime"]  # the front, as an engine names it
    assert found.prestart == (
        "/w/opt-cdictk/bin/nvidia-container-runtime-hook",
        ["nvidia-container-runtime-hook", "prestart"],
    )
    settings = tmp_path / "cdictk-config-runtime.toml"
    assert found.env == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CDICTK_CONFIG": str(settings),  # which also sends the front's every command to the runtime
        "CDICTK_CACHE_DIR": str(tmp_path / "cdictk-config-runtime-cache"),
    }
    assert tomllib.loads(settings.read_text())["runtime"]["spec-dirs"] == ["/w/cdi/runtime"]


@pytest.fixture
def containers(tmp_path: Path) -> Containers:
    """A fake runc that logs its arguments and says which containers it still has."""
    runc = tmp_path / "runc"
    runc.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/runc.log\n'
        f'case "$*" in *" list -q") cat {tmp_path}/left 2>/dev/null ;; esac\n'
    )
    runc.chmod(0o755)
    image = tmp_path / "image"
    (image / "bin").mkdir(parents=True)
    (image / "bin" / "busybox").write_text("bb")
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    return Containers(recorder, str(runc), str(tmp_path / "work"), str(image))


def runc_log(containers: Containers) -> list[str]:
    return (Path(containers.runc).parent / "runc.log").read_text().splitlines()


def test_each_container_gets_its_own_rootfs_and_is_deleted_after_its_run(containers: Containers) -> None:
    made = [containers.bundle("gpu", lambda rootfs: oci_config(rootfs, ["/bin/true"])) for _ in range(2)]
    (first, first_id), (second, second_id) = made
    assert first != second and first_id != second_id and first_id.startswith("realnode-gpu-1-")
    config = json.loads((Path(first) / "config.json").read_text())
    assert config["root"]["path"] == f"{first}/rootfs"
    assert (Path(first) / "rootfs/bin/busybox").stat().st_ino == (
        Path(containers.image) / "bin/busybox"
    ).stat().st_ino
    assert containers.run(first, first_id).ok
    containers.run(second, second_id, delete=False)
    state = containers.state
    assert runc_log(containers) == [
        f"--root {state} run --bundle {first} {first_id}",
        f"--root {state} delete --force {first_id}",
        f"--root {state} run --bundle {second} {second_id}",
    ]


def test_cleanup_deletes_what_is_left_and_names_what_would_not_go(containers: Containers) -> None:
    assert containers.cleanup() == []  # no state dir: nothing ever ran
    Path(containers.state).mkdir(parents=True)
    (Path(containers.runc).parent / "left").write_text("realnode-gpu-1-abc\n")
    assert containers.cleanup() == ["realnode-gpu-1-abc"]
    assert f"--root {containers.state} delete --force realnode-gpu-1-abc" in runc_log(containers)
