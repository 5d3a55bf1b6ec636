"""A spec generated for the fake GPU node, used by real runtimes: `cdictk cdi inject` into a runc/crun
bundle, and `podman run --device nvidia.com/gpu=0` reading it from /var/run/cdi.

The container gets /dev/nvidia0 (allowed: open reaches the absent driver, ENXIO), not /dev/nvidia1,
the control and DRM nodes, and the driver's files mounted read-only. The spec targets cdiVersion 0.5.0,
the newest that podman 4.3 accepts. Its hooks run cdictk's hook entry point with the host's Python.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import NodeFactory
from tests.e2e.conftest import ENXIO, IMAGE, Podman, Runtime
from tests.e2e.test_runtimes import cdictk, make_bundle
from tests.fakenode.node import LIB_DIR, FakeNode

pytestmark = pytest.mark.root

V = "580.95.05"
PODMAN_SPEC_DIR = Path("/var/run/cdi")
INSIDE = (
    "ls -l /dev/nvidia0; cat /dev/nvidia0; cat /dev/nvidiactl; cat /dev/nvidia-uvm; ls /dev/nvidia1; "
    "cat /dev/dri/renderD128; "
    f"grep ' {LIB_DIR}/libcuda.so.{V} ' /proc/self/mountinfo; "
    "grep ' /usr/bin/nvidia-smi ' /proc/self/mountinfo; /usr/bin/nvidia-smi; "
    "echo VISIBLE=$NVIDIA_VISIBLE_DEVICES"
)


def generated_spec(node: FakeNode, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / f"cdictk-e2e-{uuid.uuid4().hex[:12]}.yaml"
    result = cdictk("cdi", "generate", *node.cli_args(), "--cdi-version", "0.5.0", "--output", str(output))
    assert result.returncode == 0, result.stderr
    return output


def check_inside(out: str) -> None:
    lines = out.splitlines()
    assert "195,   0" in next(line for line in lines if line.endswith("/dev/nvidia0"))
    for node in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dri/renderD128"):
        assert f"can't open '{node}': {ENXIO}" in out, out
    assert "ls: /dev/nvidia1: No such file or directory" in out
    for path in (f"{LIB_DIR}/libcuda.so.{V}", "/usr/bin/nvidia-smi"):
        mountinfo = next(line for line in lines if f" {path} " in line)
        assert " ro," in mountinfo or " ro " in mountinfo, mountinfo
    assert "fake" in lines  # the node's nvidia-smi ran from its read-only mount
    assert "VISIBLE=void" in lines


def test_generated_spec_through_inject(
    runtime: Runtime, rootfs: Path, make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    spec = generated_spec(node, tmp_path / "cdi")
    own_rootfs = tmp_path / "rootfs"  # the hook writes links and an ld cache into it
    shutil.copytree(rootfs, own_rootfs, symlinks=True)
    bundle = make_bundle(tmp_path / "bundle", own_rootfs, INSIDE)
    config = json.loads((bundle / "config.json").read_text())
    config["root"]["readonly"] = False  # crun makes the rootfs read-only before createContainer hooks
    (bundle / "config.json").write_text(json.dumps(config))
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(spec.parent), "-d", "nvidia.com/gpu=0", str(bundle / "config.json")
    )
    assert injected.returncode == 0, injected.stderr
    hooks = json.loads((bundle / "config.json").read_text())["hooks"]["createContainer"]
    assert [hook["args"][4] for hook in hooks] == ["batch"]  # links, device links, compat, ld cache
    _, result = runtime.run(bundle)
    # The runtime ran the hook (a failing hook stops the container); tests/e2e/test_hooks.py checks
    # what it did inside.
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{result.stdout}"
    check_inside(result.stdout)


def test_a_wrapper_script_on_the_host_path_is_not_what_the_container_gets(
    runtime: Runtime, rootfs: Path, make_node: NodeFactory, tmp_path: Path
) -> None:
    """As on a GKE-style node: /usr/bin/nvidia-smi is a script that execs
    /usr/local/nvidia/bin/nvidia-smi; mounted as the binary, it would fail in every container."""
    node = make_node("single")
    driver_bin = Path(node.root, "usr/local/nvidia/bin")
    driver_bin.mkdir(parents=True)
    wrapper = Path(node.root, "usr/bin/nvidia-smi")
    wrapper.rename(driver_bin / "nvidia-smi")
    wrapper.write_text('#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi "$@"\n')
    wrapper.chmod(0o755)
    spec = generated_spec(node, tmp_path / "cdi")
    own_rootfs = tmp_path / "rootfs"  # the runtime makes the mount points in it: not in the shared one
    shutil.copytree(rootfs, own_rootfs, symlinks=True)
    bundle = make_bundle(tmp_path / "bundle", own_rootfs, "/usr/bin/nvidia-smi")
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(spec.parent), "-d", "nvidia.com/gpu=0", str(bundle / "config.json")
    )
    assert injected.returncode == 0, injected.stderr
    config = json.loads((bundle / "config.json").read_text())
    config.pop("hooks", None)  # what is asked here is the mount alone
    (bundle / "config.json").write_text(json.dumps(config))
    mounts = {m["destination"]: m["source"] for m in config["mounts"]}
    assert mounts["/usr/bin/nvidia-smi"] == str(driver_bin / "nvidia-smi")
    _, result = runtime.run(bundle)
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{result.stdout}"
    assert result.stdout.splitlines() == ["fake"]  # the driver's program, found on the image's PATH


@pytest.fixture
def podman_generated_spec(make_node: NodeFactory) -> Iterator[Path]:
    spec = generated_spec(make_node("single"), PODMAN_SPEC_DIR)
    try:
        yield spec
    finally:
        spec.unlink()


def test_podman_runs_the_generated_spec(podman: Podman, podman_generated_spec: Path) -> None:
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--device",
        "nvidia.com/gpu=0",
        IMAGE,
        "sh",
        "-c",
        f"exec 2>&1; {INSIDE}",
    )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode() + out
    check_inside(out)
