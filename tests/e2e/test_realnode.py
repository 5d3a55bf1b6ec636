"""The real-node check's dry run: the bundle `make real-node-bundle` builds, run against the fake eight-GPU node.

The same ``real-node-check`` the lead runs on a GPU node, from a bundle built the same way (cdictk's wheels
for CPython 3.11 and 3.12, runc with its libseccomp, busybox, the CUDA probe, and the node runtime of the
image `make image` builds: the session's image, ``CDICTK_IMAGE_DIR``'s when set), so the check cannot rot
between real nodes. What differs is named on its command line: --driver-root, --dev-root, --proc-root and
--sys-root at the fake node, --expect-smi at what the node's stub nvidia-smi prints, --nvcc none (the fake
libcuda.so.1 answers the probe's cuInit and cuDeviceGetCount, not a CUDA program's runtime), fewer timing
rounds and a smaller burst. It runs with this test's Python, itself a virtual environment's, as a GPU
node's may be. NVIDIA's tools (built ad hoc from their source) go into the bundle when
``CDICTK_NVIDIA_TOOLS`` names their directory; without them (CI) their steps, and only those, skip.
Needs root, gcc, runc, busybox-static, the cached bookworm-python root and PyPI (the bundle's wheels).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeimage import makeimage
from tests import REPO
from tests.e2e.conftest import busybox_problem, require_root, require_tool
from tests.fakenode.node import FakeNode, build_node

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
]  # the bundle built and run: minutes, beside the README suite in CI

NVIDIA_TOOLS = os.environ.get("CDICTK_NVIDIA_TOOLS", "")
STEPS = (
    "node facts",
    "bundle unpacked, runc runs",
    "cdictk installed from the wheels",
    "CUDA program",
    "cdictk cdi generate --mode auto",
    "cdictk cdi validate",
    "cdictk info",
    "nvidia-ctk cdi generate",
    "specs compared item by item",
    "node runtime: installed by its own cdictk",
    "node runtime: cdi generate, validate",
    "container image (node libc, busybox)",
    "runc: a container without GPU",
    "host: probe, CUDA program, nvidia-smi",
    "GPU container: cdictk's spec, injected",
    "GPU container: NVIDIA's spec and hooks, injected",
    "cdictk-runtime and prestart set up",
    "GPU container: cdictk-runtime, env request",
    "GPU container: cdictk-runtime, annotation",
    "GPU container: legacy prestart hook",
    "node runtime: spec + hook, injected",
    "node runtime: cdictk-runtime, env request",
    "node runtime: cdictk-runtime, annotation",
    "node runtime: legacy prestart hook",
    "start time, 3 rounds interleaved",
    "node runtime: start time, 3 rounds",
    "burst: 8 GPU containers, 4 at a time",
    "cleanup",
)
NEEDS_NVIDIA = {
    "nvidia-ctk cdi generate": "NVIDIA's tools are not in the bundle",
    "specs compared item by item": "needs both specs",
    "GPU container: NVIDIA's spec and hooks, injected": "needs NVIDIA's spec and hooks",
}


# cdictk's ways through the node runtime: its spec's hook, its shim's front and its prestart hook.
RUNTIME_GPU_ROWS = (
    "node runtime: spec + hook, injected",
    "node runtime: cdictk-runtime, env request",
    "node runtime: cdictk-runtime, annotation",
    "node runtime: legacy prestart hook",
)
# Every way a GPU reaches a container: each row must have run the probe and the fake nvidia-smi in it.
GPU_ROWS = (*(name for name in STEPS if name.startswith("GPU container")), *RUNTIME_GPU_ROWS)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, node_image: makeimage.Built) -> Path:
    require_root()
    for tool in ("gcc", "runc"):
        require_tool(tool)
    problem = busybox_problem()
    if problem is not None:
        pytest.skip(problem)
    out = tmp_path_factory.mktemp("real-node") / "bundle"
    image = node_image.layout.parent  # what make image wrote: the OCI layout and the layers' trees
    command = [sys.executable, "-m", "realnode.bundle", "--out", str(out), "--image", str(image)]
    if NVIDIA_TOOLS:
        command += ["--nvidia-tools", NVIDIA_TOOLS]
    built = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr + built.stdout
    return out


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> FakeNode:
    return build_node(str(tmp_path_factory.mktemp("real-node-fake") / "node"), "eight", stub_cache)


def dry_run(bundle: Path, node: FakeNode, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, str(bundle / "real-node-check"), "--out", str(out),
        "--driver-root", node.root, "--proc-root", node.proc, "--sys-root", node.sys,
        "--expect-smi", "^fake$", "--nvcc", "none", "--rounds", "3", "--burst", "8", "--parallel", "4",
        *extra,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=400, check=False, cwd="/")


def test_the_dry_run_passes_every_step_on_the_fake_node(bundle: Path, node: FakeNode, tmp_path: Path) -> None:
    result = dry_run(bundle, node, tmp_path / "out")
    report: dict[str, Any] = json.loads((tmp_path / "out" / "real-node-report.json").read_text())
    rows = {row["name"]: row for row in report["steps"]}
    assert list(rows) == list(STEPS), result.stdout
    for name, row in rows.items():
        if not NVIDIA_TOOLS and name in NEEDS_NVIDIA:
            assert row["status"] == "skip" and NEEDS_NVIDIA[name] in row["detail"], row
        else:
            assert row["status"] in ("pass", "info"), (
                f"{name}: {row['detail']}\n{row['tail']}\n{result.stdout}"
            )
    assert result.returncode == 0, result.stdout + result.stderr
    # The table, one row per step, and the closing line; the files the lead gets back.
    for name in STEPS:
        assert any(line.startswith(name) for line in result.stdout.splitlines()), name
    assert "real-node-check: " in result.stdout.splitlines()[-1]
    expected = {
        "real-node-report.json",
        "real-node-check.log",
        "spec-cdictk.yaml",
        "spec-cdictk-runtime.yaml",
    }
    expected |= {"spec-nvidia.yaml"} if NVIDIA_TOOLS else set()
    assert {path.name for path in (tmp_path / "out").iterdir()} == expected
    # The ways ran the probe and the fake nvidia-smi in the container, the node runtime's four too.
    for name in GPU_ROWS:
        if rows[name]["status"] == "pass":
            output = rows[name]["data"]["output"]
            assert "probe: cuInit ok, 1 CUDA device(s), libcuda from /usr/lib/x86_64-linux-gnu/" in output
            assert "\nfake\nsmi-exit=0" in output
    # The figures, and nothing left behind: containers, the work dir, runc's libseccomp link.
    timing = report["timing"]
    assert timing["no GPU"]["rounds"] == 3 and timing["cdictk's spec + hook"]["rounds"] == 3
    assert report["burst"]["failed"] == 0 and report["burst"]["containers"] == 8
    # The node runtime: the image's, installed by its own cdictk, on its own C library; its spec's
    # hook the prefix's current one, the rest as the venv's; the shim's front ran; its figures.
    carried = json.loads((bundle / "manifest.json").read_text())["node_runtime"]
    runtime = report["node_runtime"]
    assert runtime["id"] == carried["id"] and runtime["prefix"].startswith(report["check"]["work"])
    assert runtime["libc"] == "glibc 2.36" and runtime["bytes"] < 40 << 20
    hook = f"{runtime['prefix']}/current/bin/cdictk-hook"
    assert rows["node runtime: cdi generate, validate"]["detail"].endswith(
        f"hook {hook}; the rest as the node Python's spec"
    )
    assert f"path: {hook}\n" in (tmp_path / "out" / "spec-cdictk-runtime.yaml").read_text()
    log = (tmp_path / "out" / "real-node-check.log").read_text()
    assert f"$ {runtime['prefix']}/bin/cdictk-runtime --root " in log
    assert runtime["timing"]["cdictk's hook, node runtime"]["rounds"] == 3
    assert runtime["timing"]["cdictk's hook, node's Python"]["rounds"] == 3
    assert set(runtime["timing"]["bare_start_ms"]) == {"node runtime", "node's Python", "node's Python is"}
    assert not os.path.exists(report["check"]["work"])
    link = rows["bundle unpacked, runc runs"]["detail"].rsplit(" ", 1)[-1]
    assert link.startswith("/tmp/sc") and not os.path.lexists(link)
    assert report["node"]["driver_version_file"].startswith("NVRM version:")


def test_the_dry_run_passes_on_a_node_whose_driver_is_under_usr_local_nvidia(
    bundle: Path, tmp_path: Path, stub_cache: str
) -> None:
    # GKE's layout: the driver in /usr/local/nvidia, outside the ld cache, and /usr/bin/nvidia-smi a
    # wrapper script. The containers must get the ELF nvidia-smi; nvidia-ctk is tried with its own root.
    gke = build_node(str(tmp_path / "node"), "gke", stub_cache)
    result = dry_run(bundle, gke, tmp_path / "out", "--rounds", "1", "--burst", "2")
    report = json.loads((tmp_path / "out" / "real-node-report.json").read_text())
    assert report["node"]["nvidia_smi_wrapper"] is True
    for row in report["steps"]:
        if not (not NVIDIA_TOOLS and row["name"] in NEEDS_NVIDIA):
            assert row["status"] in ("pass", "info"), f"{row['name']}: {row['detail']}\n{row['tail']}"
    assert result.returncode == 0, result.stdout
    rows = {row["name"]: row for row in report["steps"]}
    for name in ("GPU container: legacy prestart hook", *RUNTIME_GPU_ROWS):
        assert "libcuda from /usr/local/nvidia/lib64/libcuda.so.1" in rows[name]["detail"], name
    if NVIDIA_TOOLS:
        assert "--driver-root " + gke.root + "/usr/local/nvidia" in rows["nvidia-ctk cdi generate"]["detail"]


def test_a_failing_step_is_a_row_and_the_check_goes_on(bundle: Path, node: FakeNode, tmp_path: Path) -> None:
    # Every GPU container fails its nvidia-smi expectation; the rest still runs and cleans up.
    result = dry_run(
        bundle, node, tmp_path / "out", "--expect-smi", "^GPU 0: ", "--rounds", "1", "--burst", "2"
    )
    assert result.returncode == 1, result.stdout
    report = json.loads((tmp_path / "out" / "real-node-report.json").read_text())
    rows = {row["name"]: row for row in report["steps"]}
    failed = {name for name, row in rows.items() if row["status"] == "FAIL"}
    assert "GPU container: cdictk's spec, injected" in failed
    assert set(RUNTIME_GPU_ROWS) <= failed
    assert all(name in GPU_ROWS or name.startswith("host:") for name in failed), failed
    assert rows["cleanup"]["status"] == "pass"
    assert "failed: nvidia-smi" in rows["GPU container: legacy prestart hook"]["detail"]
    assert not os.path.exists(report["check"]["work"])


def test_a_node_whose_python_cannot_run_cdictk_still_checks_the_node_runtime(
    bundle: Path, node: FakeNode, tmp_path: Path
) -> None:
    # As on a node with only an older Python: no wheel of the bundle's fits it, so no venv. Every row
    # of the node runtime needs none: they pass, and only what needs the venv skips.
    bare = tmp_path / "bundle"
    subprocess.run(["cp", "-a", str(bundle), str(bare)], check=True)
    for wheel in (bare / "wheels").glob("*-cp3*-*.whl"):
        wheel.unlink()
    result = dry_run(bare, node, tmp_path / "out", "--rounds", "1", "--burst", "2")
    assert result.returncode == 1, result.stdout
    report = json.loads((tmp_path / "out" / "real-node-report.json").read_text())
    rows = {row["name"]: row for row in report["steps"]}
    assert [name for name, row in rows.items() if row["status"] == "FAIL"] == [
        "cdictk installed from the wheels"
    ]
    assert "no cp311 wheels in the bundle" in rows["cdictk installed from the wheels"]["detail"]
    for name in (
        *(name for name in rows if name.startswith("node runtime: ")),
        "host: probe, CUDA program, nvidia-smi",
    ):
        assert rows[name]["status"] == "pass", f"{name}: {rows[name]['detail']}\n{rows[name]['tail']}"
    assert rows["node runtime: cdi generate, validate"]["detail"].endswith(
        "no spec of the node's Python to hold it against"
    )
    assert rows["GPU container: cdictk's spec, injected"]["status"] == "skip"
