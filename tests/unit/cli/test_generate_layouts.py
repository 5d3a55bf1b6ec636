"""`cdictk cdi generate` on every driver layout NVIDIA supports, with the default driver root and with
``--driver-root`` at the driver's own tree: Debian's multiarch directories, RHEL's lib64 with a merged
/usr, a ``.run`` install, GKE's /usr/local/nvidia tree (wrapper scripts on the host's PATH, no ld.so.cache
entry, a custom firmware path) and a driver container's root at /run/nvidia/driver.

Whatever the layout, the container gets the driver's libraries where its ld cache finds them, the ELF
programs (never a wrapper script) where its PATH finds them, the GSP firmware at /lib/firmware and the
config files where its loaders look.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.cdi.model import Spec
from tests.conftest import NodeFactory
from tests.fakenode.node import FakeNode
from tests.unit.cli.test_generate import device, generate, mount_paths, node_paths, write_spec

pytestmark = pytest.mark.root

V = "580.95.05"
ELF_MAGIC = b"\x7fELF"
LAYOUTS = ("single", "rhel", "runfile", "gke", "driver-container")
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _spec(
    capsys: pytest.CaptureFixture[str], node: FakeNode, tmp_path: Path, at_tree: bool
) -> tuple[Spec, str]:
    """The spec and the driver's library directory as the container sees it."""
    if not at_tree:
        return write_spec(capsys, node, tmp_path), node.container_lib_dir
    # write_spec passes cli_args(); the tree's own flags come after and win.
    return write_spec(capsys, node, tmp_path, *node.tree_cli_args()), node.preset.layout.lib_dir


@pytest.mark.parametrize("at_tree", [False, True], ids=["default-root", "driver-root-at-tree"])
@pytest.mark.parametrize("preset", LAYOUTS)
def test_every_layout_gives_the_container_a_working_driver(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path, preset: str, at_tree: bool
) -> None:
    node = make_node(preset)
    spec, lib_dir = _spec(capsys, node, tmp_path, at_tree)
    common = spec.container_edits
    mounts = {m.container_path: m.host_path for m in common.mounts}

    assert mounts[f"{lib_dir}/libcuda.so.{V}"] == f"{node.lib_dir}/libcuda.so.{V}"
    assert f"NVIDIA_CTK_LIBCUDA_DIR={lib_dir}" in common.env
    hook_args = common.hooks[0].args
    assert hook_args[hook_args.index("--folder") + 1] == lib_dir  # the container's ld cache gets it
    assert f"libcuda.so.1::{lib_dir}/libcuda.so" in hook_args

    # The driver's ELF program, on the container's PATH; GKE's wrapper script never.
    smi = [path for path in mounts if os.path.basename(path) == "nvidia-smi"]
    assert len(smi) == 1 and os.path.dirname(smi[0]) in PATH_DIRS, smi
    with open(mounts[smi[0]], "rb") as program:
        assert program.read(4) == ELF_MAGIC
    assert mounts[smi[0]] == f"{node.tree}{node.preset.layout.bin_dir}/nvidia-smi"

    firmware = f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin"
    assert os.path.exists(mounts[firmware])
    assert mounts["/usr/share/vulkan/icd.d/nvidia_icd.json"].startswith(node.tree)
    if node.preset.layout.xorg_dirs is not None:
        drivers, extensions = node.preset.layout.xorg_dirs
        assert f"{drivers}/nvidia_drv.so" in mounts
        assert f"{extensions}/libglxserver_nvidia.so.{V}" in mounts

    gpu = device(spec, "0").container_edits
    assert node_paths(gpu) == ["/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128"]
    assert all(os.path.exists(n.host_path or n.path) for n in gpu.device_nodes)
    assert "/dev/nvidiactl" in node_paths(common)
    assert all(options[0] == "ro" for options in mount_paths(common).values())


def test_gke_configs_go_where_the_image_loaders_look(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    """GKE keeps them in /usr/local/nvidia/share, which no loader in an image reads."""
    node = make_node("gke")
    mounts = {
        m.container_path: m.host_path for m in write_spec(capsys, node, tmp_path).container_edits.mounts
    }
    shared = {path: host for path, host in mounts.items() if host.startswith(f"{node.tree}/share/")}
    assert sorted(shared) == [
        "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/nvidia/nvoptix.bin",
        "/usr/share/vulkan/icd.d/nvidia_icd.json",
    ]
    assert not any(path.startswith("/usr/local/nvidia/share") for path in mounts)


def test_a_driver_container_is_found_from_the_host_root(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("driver-container")
    code, _, err = generate(capsys, node, "--output", str(tmp_path / "nvidia.yaml"))
    assert code == 0, err
    tree = f"{node.root}/run/nvidia/driver"
    assert f"no driver under {node.root}; using the driver container's at {tree}" in err
