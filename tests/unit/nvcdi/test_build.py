"""Spec building from hand-made facts: MIG cap lookups, the all device, sorting and version fitting."""

from __future__ import annotations

import pytest

from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.node.devnodes import NodeInfo
from cdictk.node.discoverers import Found
from cdictk.node.driverfiles import DriverFile, FileKind
from cdictk.node.drm import DrmInfo
from cdictk.node.facts import NodeFacts
from cdictk.node.gpus import Gpu, MigDevice
from cdictk.node.libraries import DriverLibrary
from cdictk.node.modes import Mode
from cdictk.node.procfs import MigMinors
from cdictk.nvcdi.build import build_spec
from cdictk.nvcdi.cdiversion import fit_version
from cdictk.nvcdi.edits import device_node, file_mount, group_only_gids
from cdictk.nvcdi.naming import Strategy
from cdictk.nvcdi.options import SpecOptions
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots

ROOTS = Roots(driver="/", dev="/", proc="/p", sys="/s")


def node(path: str, major: int = 195, minor: int = 0, mode: int = 0o666, gid: int = 0) -> NodeInfo:
    return NodeInfo(path, path, major, minor, mode, gid)


def facts(gpus: list[Gpu], *, minors: MigMinors | None = None) -> NodeFacts:
    return NodeFacts(
        roots=ROOTS,
        mode=Mode.NVML,
        driver_version="1.2.3",
        gpus=gpus,
        modules=None,
        common=Found(
            nodes=[node("/dev/nvidiactl", minor=255)],
            libraries=[DriverLibrary("/usr/lib/libcuda.so.1.2.3", "libcuda.so.1")],
        ),
        gpu_nodes={g.minor: node(f"/dev/nvidia{g.minor}", minor=g.minor) for g in gpus},
        drm={},
        mig_minors=minors,
        caps_major=241,
    )


def test_edits_from_nodes_and_files() -> None:
    made = device_node(NodeInfo("/dev/x", "/root/dev/x", 1, 2, 0o640, 44))
    assert (made.host_path, made.type, made.file_mode, made.permissions, made.gid) == (
        "/root/dev/x",
        "c",
        0o640,
        "rwm",
        44,
    )
    assert device_node(node("/dev/y")).host_path == ""  # same as path: left out
    assert group_only_gids(
        [node("/a", gid=44, mode=0o660), node("/b", gid=45, mode=0o666), node("/c", gid=0)]
    ) == [44]
    socket = file_mount(DriverFile("/run/s", "/r/run/s", FileKind.SOCKET))
    assert socket.options[0] == "ro" and "noexec" in socket.options
    assert file_mount(DriverFile("/usr/bin/x", "/r/usr/bin/x", FileKind.BINARY)).options[0] == "ro"


def test_mig_devices_use_the_cap_minors_and_missing_ones_are_left_out_with_a_warning() -> None:
    migs = (MigDevice(0, 0, 1, 0, "MIG-a", "3g.40gb"), MigDevice(0, 3, 5, 0, "MIG-b", "1g.10gb"))
    gpus = [Gpu(0, 0, "GPU-0", "0000:01:00.0", "G", True, migs), Gpu(1, 1, "GPU-1", "0000:02:00.0", "G")]
    minors = MigMinors(1, 2, {(0, 1, None): 12, (0, 1, 0): 13})
    spec, warnings = build_spec(facts(gpus, minors=minors), SpecOptions(strategies=(Strategy.INDEX,)))
    assert [d.name for d in spec.devices] == ["0:0", "1", "all"]
    mig = spec.devices[0].container_edits
    assert [(n.path, n.major, n.minor) for n in mig.device_nodes] == [
        ("/dev/nvidia0", 195, 0),
        ("/dev/nvidia-caps/nvidia-cap12", 241, 12),
        ("/dev/nvidia-caps/nvidia-cap13", 241, 13),
    ]
    assert warnings == [
        "MIG device 0:3 (MIG-b): no capability minors for GI 5 / CI 0 in mig-minors; left out"
    ]
    assert [n.path for n in spec.devices[-1].container_edits.device_nodes] == [
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13",
    ]  # fmt: skip


def test_gpu_without_node_and_nothing_left() -> None:
    base = facts([Gpu(0, 0, "GPU-0", "0000:01:00.0", "G")])
    base.gpu_nodes = {}
    with pytest.raises(CdictkError, match="no devices to write"):
        build_spec(base, SpecOptions())


def test_by_path_links_become_a_device_hook_only_with_a_hook_program() -> None:
    from cdictk.nvcdi.hooks import hook_program

    base = facts([Gpu(0, 0, "GPU-0", "0000:01:00.0", "G")])
    base.drm = {
        "0000:01:00.0": DrmInfo([node("/dev/dri/card1", 226, 1)], [("../card1", "/dev/dri/by-path/x-card")])
    }
    spec, _ = build_spec(base, SpecOptions(hook_program=hook_program("/usr/bin/nvidia-cdi-hook")))
    assert spec.devices[0].container_edits.hooks[0].args == [
        "nvidia-cdi-hook", "create-symlinks", "--link", "../card1::/dev/dri/by-path/x-card",
    ]  # fmt: skip
    spec, _ = build_spec(base, SpecOptions(hook_program=None))
    assert not spec.devices[0].container_edits.hooks and not spec.container_edits.hooks


@pytest.mark.parametrize("profile", ["1g.24gb+gfx", "1g.24gb+me,gfx", "1g.24gb+me+gfx"])
def test_a_gfx_mig_device_gets_its_parents_drm_nodes_and_links(profile: str) -> None:
    """A +gfx instance (RTX PRO 6000 Blackwell) does graphics; NVIDIA gives it the DRM nodes,
    whatever other attributes the profile has (NVIDIA joins them with commas)."""
    migs = (MigDevice(0, 0, 1, 0, "MIG-g", profile), MigDevice(0, 1, 2, 0, "MIG-c", "1g.24gb+me"))
    base = facts(
        [Gpu(0, 0, "GPU-0", "0000:01:00.0", "RTX PRO 6000", True, migs)],
        minors=MigMinors(1, 2, {(0, 1, None): 12, (0, 1, 0): 13, (0, 2, None): 21, (0, 2, 0): 22}),
    )
    base.drm = {
        "0000:01:00.0": DrmInfo(
            [node("/dev/dri/card1", 226, 1), node("/dev/dri/renderD128", 226, 128)],
            [("../card1", "/dev/dri/by-path/pci-0000:01:00.0-card")],
        )
    }
    spec, _ = build_spec(base, SpecOptions(strategies=(Strategy.INDEX,), hook_program=None))
    gfx, compute = (spec.devices[0].container_edits, spec.devices[1].container_edits)
    assert {"/dev/dri/card1", "/dev/dri/renderD128"} <= {n.path for n in gfx.device_nodes}
    assert not any(n.path.startswith("/dev/dri") for n in compute.device_nodes)


def test_the_dgx_display_gpu_is_no_device_unless_asked_for() -> None:
    """NVIDIA's enumeration skips a DGX Station's display GPU; it is not in 'all' either."""
    gpus = [
        Gpu(0, 0, "GPU-0", "0000:01:00.0", "NVIDIA A100"),
        Gpu(1, 1, "GPU-1", "0000:02:00.0", "DGX Display"),
    ]
    spec, warnings = build_spec(facts(gpus), SpecOptions(strategies=(Strategy.INDEX,)))
    assert [d.name for d in spec.devices] == ["0", "all"]
    assert [n.path for n in spec.devices[-1].container_edits.device_nodes] == ["/dev/nvidia0"]
    assert warnings == [
        "GPU 1 (DGX Display) drives the workstation's displays: no device for it (--include-display-gpus gives it one)"
    ]
    gpus[1] = Gpu(1, 1, "GPU-1", "0000:02:00.0", "NVIDIA DGX Display")
    spec, _ = build_spec(facts(gpus), SpecOptions(strategies=(Strategy.INDEX,), include_display_gpus=True))
    assert [d.name for d in spec.devices] == ["0", "1", "all"]


def test_fit_version() -> None:
    spec = Spec(
        cdi_version="0.7.0",
        kind="nvidia.com/gpu",
        annotations={"a.b/c": "d"},
        devices=[Device(name="gpu0", container_edits=ContainerEdits(additional_gids=[44], env=["A=1"]))],
    )
    warnings = fit_version(spec, "v0.5.0")
    assert spec.cdi_version == "0.3.0" and spec.annotations == {}
    assert len(warnings) == 2
    digits = Spec(
        cdi_version="0.5.0",
        kind="nvidia.com/gpu",
        devices=[Device(name="0", container_edits=ContainerEdits(env=["A=1"]))],
    )
    with pytest.raises(CdictkError, match=r"needs cdiVersion 0\.5\.0"):
        fit_version(digits, "0.4.0")
    assert fit_version(digits, "1.1.0") == [] and digits.cdi_version == "0.5.0"
