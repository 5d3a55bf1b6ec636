"""Every driver layout, end to end: a spec generated on the fake node (with the default driver root and
with ``--driver-root`` at the driver's own tree) is injected into a runc bundle on a Debian image, and
the container runs ``nvidia-smi`` from its PATH (the node's ELF stub, never GKE's wrapper script) and a
program that dlopens ``libcuda.so.1`` through the ld cache the spec's hook rebuilt; the hook's application
profile limits EGL and Vulkan to the container's GPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import NodeFactory
from tests.e2e.conftest import Runtime, overlay, require_root, require_tool
from tests.e2e.test_runtimes import cdictk, make_bundle
from tests.unit.cli.test_generate_layouts import LAYOUTS

pytestmark = pytest.mark.root

PROBE_SOURCE = Path(__file__).resolve().parent / "cuda_probe.c"
V = "580.95.05"


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = require_tool("gcc")
    out = tmp_path_factory.mktemp("probe") / "cuda-probe"
    subprocess.run([gcc, "-O1", "-o", str(out), str(PROBE_SOURCE), "-ldl"], check=True)
    return out


@pytest.fixture
def runc(tmp_path: Path) -> Runtime:
    require_root()
    return Runtime("runc", require_tool("runc"), tmp_path / "runc-state")


@pytest.fixture
def image(tmp_path: Path, debian_rootfs_cache: Path, probe: Path) -> Iterator[Path]:
    """A writable Debian image with the probe in /usr/local/bin."""
    with overlay(debian_rootfs_cache, tmp_path / "overlay") as rootfs:
        shutil.copy2(probe, rootfs / "usr/local/bin/cuda-probe")
        yield rootfs


@pytest.mark.parametrize("at_tree", [False, True], ids=["default-root", "driver-root-at-tree"])
@pytest.mark.parametrize("preset", LAYOUTS)
def test_a_container_runs_nvidia_smi_and_loads_libcuda(
    *, make_node: NodeFactory, image: Path, runc: Runtime, tmp_path: Path, preset: str, at_tree: bool
) -> None:
    node = make_node(preset)
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    args = node.tree_cli_args() if at_tree else node.cli_args()
    generated = cdictk("cdi", "generate", *args, "--output", str(spec_dir / "nvidia.yaml"))
    assert generated.returncode == 0, generated.stderr
    lib_dir = node.preset.layout.lib_dir if at_tree else node.container_lib_dir

    profile = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"
    bundle = make_bundle(
        tmp_path / "bundle", image, f"nvidia-smi; cuda-probe; ls /dev/nvidia0; cat {profile}"
    )
    config_path = bundle / "config.json"
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "nvidia.com/gpu=0", str(config_path)
    )
    assert injected.returncode == 0, injected.stderr
    config = json.loads(config_path.read_text())
    config["root"]["readonly"] = False  # the hook writes links and the ld cache into the image
    config_path.write_text(json.dumps(config))

    _, result = runc.run(bundle)
    assert result.returncode == 0, f"runc failed: {result.stderr}{result.stdout}"
    assert result.stdout.splitlines() == [
        "fake",  # the driver's nvidia-smi, found on the image's PATH
        f"libcuda.so.1 from {lib_dir}/libcuda.so.1 returned 0",
        "/dev/nvidia0",
        # EGL and Vulkan see GPU 0 alone (the mask of the container's /dev/nvidiaN minors).
        '{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x1]}],'
        '"rules":[{"pattern":[],"profile":"_container_"}]}',
    ]
