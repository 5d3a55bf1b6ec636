"""`cdictk cdi inject`, then a real container with runc and crun: the CDI edits arrive as runtimes apply them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ENXIO, EPERM, FakeGpuHost, Runtime, oci_config

pytestmark = pytest.mark.root

INSIDE = (
    "ls -l /dev/nvidia0 /dev/nvidiactl; cat /dev/nvidia0; cat /dev/nvidiactl; "
    "ls -l /dev/nvidia1; cat /dev/nvidia1; cat /mounted/file; "
    "grep ' /mounted/file ' /proc/self/mountinfo; echo CDI_TEST=$CDI_TEST; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES"
)


def cdictk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdictk", *args], capture_output=True, text=True, check=False
    )


def make_bundle(path: Path, rootfs: Path, script: str) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(oci_config(rootfs, ["sh", "-c", f"exec 2>&1; {script}"])))
    return path


def add_denied_node(bundle: Path) -> None:
    """Put /dev/nvidia1 in the container without a cgroup allow rule: the EPERM control case."""
    config = json.loads((bundle / "config.json").read_text())
    config["linux"]["devices"].append({"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1})
    (bundle / "config.json").write_text(json.dumps(config))


def test_injected_device_mount_env_and_hook_reach_the_container(
    runtime: Runtime, rootfs: Path, fake_gpu_host: FakeGpuHost, spec_dir: Path, tmp_path: Path
) -> None:
    bundle = make_bundle(tmp_path / "bundle", rootfs, INSIDE)
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "nvidia.com/gpu=0", str(bundle / "config.json")
    )
    assert injected.returncode == 0, injected.stderr
    add_denied_node(bundle)

    container, result = runtime.run(bundle)
    out = result.stdout
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{out}"

    lines = out.splitlines()
    node0 = next(line for line in lines if line.endswith("/dev/nvidia0"))
    assert node0.startswith("crw-rw-rw-") and "195,   0" in node0
    assert "195, 255" in next(line for line in lines if line.endswith("/dev/nvidiactl"))
    # Allowed by the device cgroup: the open reaches the (absent) driver.
    assert f"can't open '/dev/nvidia0': {ENXIO}" in out
    assert f"can't open '/dev/nvidiactl': {ENXIO}" in out
    # Present but not allowed (added by hand, no rule): the cgroup refuses the open.
    assert f"can't open '/dev/nvidia1': {EPERM}" in out
    assert "hello from the host" in out
    mountinfo = next(line for line in lines if " /mounted/file " in line)
    assert " ro," in mountinfo or " ro " in mountinfo
    assert "CDI_TEST=hello" in lines
    assert "VISIBLE=void" in lines

    log = fake_gpu_host.hook_log
    state = json.loads((log / f"{container}.state.json").read_text())
    assert state["id"] == container
    assert state["bundle"] == str(bundle)
    # The hook ran with the env the spec gave it, not the container's.
    hook_env = (log / f"{container}.env").read_text().split()
    assert "CDICTK_E2E" in hook_env
    assert "CDI_TEST" not in hook_env


def test_device_without_injection_is_absent(runtime: Runtime, rootfs: Path, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "bundle", rootfs, "ls /dev/nvidia0; cat /dev/nvidia0")
    _, result = runtime.run(bundle)
    assert "No such file or directory" in result.stdout
    assert ENXIO not in result.stdout


def test_all_devices_of_a_request_arrive(
    runtime: Runtime, rootfs: Path, fake_gpu_host: FakeGpuHost, spec_dir: Path, tmp_path: Path
) -> None:
    bundle = make_bundle(tmp_path / "bundle", rootfs, "cat /dev/nvidia0; cat /dev/nvidia1; echo end")
    injected = cdictk(
        "cdi",
        "inject",
        "--spec-dir",
        str(spec_dir),
        "-d",
        "nvidia.com/gpu=0",
        "-d",
        "nvidia.com/gpu=1",
        str(bundle / "config.json"),
    )
    assert injected.returncode == 0, injected.stderr
    _, result = runtime.run(bundle)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(ENXIO) == 2, result.stdout
    assert EPERM not in result.stdout
