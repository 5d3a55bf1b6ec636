"""NVIDIA_DRIVER_CAPABILITIES against the driver files a spec mounts: which mounts a container gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdictk.cdi.dump import to_data
from cdictk.cdi.load import load_spec
from cdictk.cdi.model import Mount
from cdictk.cli.main import main
from cdictk.startpath.shim.capabilities import COMPAT32, classify, effective_capabilities, select_mounts
from cdictk.startpath.shim.requests import ALL_CAPABILITIES, DEFAULT_CAPABILITIES
from tests import REPO as CLONE
from tests.conftest import NodeFactory

REPO = str(CLONE)
V = "580.95.05"
LIB = "/usr/lib/x86_64-linux-gnu"
LIB32 = "/usr/lib/i386-linux-gnu"
RO = ["ro", "nosuid", "nodev", "rbind", "rprivate"]

# Files of a 580 driver install (Debian/Ubuntu layout, as NVIDIA's .run installer lays them out) and the
# capability each belongs to; None: kept whatever is asked for.
DRIVER_FILES: list[tuple[str, str | None]] = [
    # compute
    (f"{LIB}/libcuda.so.{V}", "compute"),
    (f"{LIB}/libcuda.so.1", "compute"),
    (f"{LIB}/libcuda.so", "compute"),
    (f"{LIB}/libcudadebugger.so.{V}", "compute"),
    (f"{LIB}/libnvidia-ptxjitcompiler.so.{V}", "compute"),
    (f"{LIB}/libnvidia-nvvm.so.{V}", "compute"),
    (f"{LIB}/libnvidia-nvvm70.so.4", "compute"),
    (f"{LIB}/libnvidia-opencl.so.{V}", "compute"),
    (f"{LIB}/libnvidia-gpucomp.so.{V}", "compute"),
    (f"{LIB}/libnvidia-pkcs11-openssl3.so.{V}", "compute"),
    (f"{LIB}/libnvidia-tileiras.so.{V}", "compute"),
    ("/etc/OpenCL/vendors/nvidia.icd", "compute"),
    ("/usr/bin/nvidia-cuda-mps-control", "compute"),
    ("/usr/bin/nvidia-cuda-mps-server", "compute"),
    ("/tmp/nvidia-mps", "compute"),
    # utility
    (f"{LIB}/libnvidia-ml.so.{V}", "utility"),
    (f"{LIB}/libnvidia-cfg.so.{V}", "utility"),
    (f"{LIB}/libnvidia-nscq.so.{V}", "utility"),
    ("/usr/bin/nvidia-smi", "utility"),
    ("/usr/bin/nvidia-debugdump", "utility"),
    ("/usr/bin/nvidia-persistenced", "utility"),
    ("/usr/bin/nv-fabricmanager", "utility"),
    ("/usr/bin/nvidia-imex", "utility"),
    ("/usr/bin/nvidia-imex-ctl", "utility"),
    ("/run/nvidia-persistenced/socket", "utility"),
    ("/var/run/nvidia-fabricmanager/socket", "utility"),
    # graphics
    (f"{LIB}/libGLX_nvidia.so.{V}", "graphics"),
    (f"{LIB}/libEGL_nvidia.so.{V}", "graphics"),
    (f"{LIB}/libGLESv2_nvidia.so.{V}", "graphics"),
    (f"{LIB}/libGLESv1_CM_nvidia.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-glcore.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-eglcore.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-glsi.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-tls.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-glvkspirv.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-rtcore.so.{V}", "graphics"),
    (f"{LIB}/libnvoptix.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-fbc.so.{V}", "graphics"),
    (f"{LIB}/libnvidia-allocator.so.{V}", "graphics"),
    (f"{LIB}/gbm/nvidia-drm_gbm.so", "graphics"),
    (f"{LIB}/libnvidia-api.so.1", "graphics"),
    (f"{LIB}/libnvidia-egl-wayland.so.1.1.19", "graphics"),
    (f"{LIB}/libnvidia-egl-wayland2.so.1.0.0", "graphics"),
    (f"{LIB}/libnvidia-egl-gbm.so.1.1.2", "graphics"),
    (f"{LIB}/libnvidia-egl-xcb.so.1", "graphics"),
    (f"{LIB}/libnvidia-egl-xlib.so.1", "graphics"),
    (f"{LIB}/libnvidia-vulkan-producer.so.{V}", "graphics"),
    ("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "graphics"),
    ("/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", "graphics"),
    ("/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", "graphics"),
    ("/usr/share/vulkan/icd.d/nvidia_icd.json", "graphics"),
    ("/etc/vulkan/icd.d/nvidia_icd.json", "graphics"),
    ("/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", "graphics"),
    ("/usr/share/nvidia/nvoptix.bin", "graphics"),
    (f"/usr/share/nvidia/nvidia-application-profiles-{V}-rc", "graphics"),
    # video
    (f"{LIB}/libnvcuvid.so.{V}", "video"),
    (f"{LIB}/libnvidia-encode.so.{V}", "video"),
    (f"{LIB}/libnvidia-opticalflow.so.{V}", "video"),
    (f"{LIB}/vdpau/libvdpau_nvidia.so.{V}", "video"),
    # display
    (f"{LIB}/nvidia/xorg/nvidia_drv.so", "display"),
    (f"{LIB}/nvidia/xorg/libglxserver_nvidia.so.{V}", "display"),
    ("/usr/lib/xorg/modules/drivers/nvidia_drv.so", "display"),
    ("/usr/share/X11/xorg.conf.d/10-nvidia.conf", "display"),
    ("/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf", "display"),
    ("/usr/bin/nvidia-xconfig", "display"),
    (f"{LIB}/libnvidia-gtk3.so.{V}", "display"),
    # ngx
    (f"{LIB}/libnvidia-ngx.so.{V}", "ngx"),
    ("/usr/bin/nvidia-ngx-updater", "ngx"),
    (f"{LIB}/nvidia/wine/nvngx.dll", "ngx"),
    # kept always
    (f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin", None),
    (f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin", None),
    (f"/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin", None),
    (f"{LIB}/libdxcore.so", None),  # WSL's transport to the GPU, needed by every capability
    (f"{LIB}/libnvidia-brand-new-thing.so.{V}", None),
    # 32-bit copies: their own capability, plus compat32 to be kept
    (f"{LIB32}/libcuda.so.{V}", "compute"),
    (f"{LIB32}/libGLX_nvidia.so.{V}", "graphics"),
    (f"{LIB32}/vdpau/libvdpau_nvidia.so.{V}", "video"),
    (f"/usr/lib32/libnvidia-ml.so.{V}", "utility"),
    (f"{LIB32}/libnvidia-brand-new-thing.so.{V}", "compat32"),
]


def capabilities_of(path: str) -> tuple[str, ...]:
    """Every capability that keeps the mount at ``path``, its own first; ``()``: kept always. A 32-bit
    copy of a kind the table does not know needs ``compat32`` alone."""
    owners, is32 = classify(path)
    return (COMPAT32,) if not owners and is32 else owners


def capability_of(path: str) -> str | None:
    """The mount's own capability (a 32-bit copy's too, though it is kept only with ``compat32``)."""
    owners = capabilities_of(path)
    return owners[0] if owners else None


def is_compat32(path: str) -> bool:
    return classify(path)[1]


def keep_mount(path: str, capabilities: frozenset[str]) -> bool:
    """Whether a container asking for ``capabilities`` gets the mount at ``path``."""
    return bool(select_mounts([{"containerPath": path}], capabilities))


@pytest.mark.parametrize(("path", "expected"), DRIVER_FILES, ids=[p for p, _ in DRIVER_FILES])
def test_each_driver_file_has_its_capability(path: str, expected: str | None) -> None:
    assert capability_of(path) == expected


def test_the_table_uses_only_known_capabilities() -> None:
    assert {c for _, c in DRIVER_FILES} - {None} <= ALL_CAPABILITIES
    assert {c for p, _ in DRIVER_FILES for c in capabilities_of(p)} <= ALL_CAPABILITIES


def test_none_means_kept_whatever_is_asked() -> None:
    nothing: frozenset[str] = frozenset()
    for path, expected in DRIVER_FILES:
        assert keep_mount(path, nothing) == (expected is None), path


def test_a_file_is_kept_for_its_own_capability_and_dropped_for_the_others() -> None:
    for path, expected in DRIVER_FILES:
        if expected is None or is_compat32(path) or expected == "compat32":
            continue
        assert keep_mount(path, frozenset({expected})), path
        others = ALL_CAPABILITIES - set(capabilities_of(path)) - {expected}
        if "graphics" in capabilities_of(path):
            others -= {"display"}  # display implies graphics
        assert not keep_mount(path, frozenset(others)), path


def test_default_capabilities_keep_cuda_and_nvidia_smi_but_not_graphics_or_video() -> None:
    kept = {path for path, _ in DRIVER_FILES if keep_mount(path, DEFAULT_CAPABILITIES)}
    for path in (
        f"{LIB}/libcuda.so.{V}",
        f"{LIB}/libnvidia-ml.so.{V}",
        f"{LIB}/libnvidia-ptxjitcompiler.so.{V}",
        f"{LIB}/libnvidia-nvvm.so.{V}",
        f"{LIB}/libnvidia-opencl.so.{V}",
        f"{LIB}/libnvidia-gpucomp.so.{V}",
        "/etc/OpenCL/vendors/nvidia.icd",
        "/usr/bin/nvidia-smi",
        "/usr/bin/nvidia-cuda-mps-control",
        "/run/nvidia-persistenced/socket",
        "/tmp/nvidia-mps",
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
    ):
        assert path in kept, path
    for path in (
        f"{LIB}/libGLX_nvidia.so.{V}",
        f"{LIB}/libEGL_nvidia.so.{V}",
        f"{LIB}/libnvidia-glcore.so.{V}",
        f"{LIB}/libnvidia-egl-wayland.so.1.1.19",
        "/usr/share/vulkan/icd.d/nvidia_icd.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        f"{LIB}/libnvcuvid.so.{V}",
        f"{LIB}/libnvidia-encode.so.{V}",
        f"{LIB}/vdpau/libvdpau_nvidia.so.{V}",
        f"{LIB}/nvidia/xorg/nvidia_drv.so",
        f"{LIB}/libnvidia-ngx.so.{V}",
        f"{LIB32}/libcuda.so.{V}",  # no compat32
    ):
        assert path not in kept, path


def test_all_keeps_every_file() -> None:
    assert all(keep_mount(path, ALL_CAPABILITIES) for path, _ in DRIVER_FILES)
    assert all(keep_mount(path, frozenset({"all"})) for path, _ in DRIVER_FILES)
    assert effective_capabilities(["all"]) == ALL_CAPABILITIES


def test_a_32_bit_copy_needs_compat32_and_its_own_capability() -> None:
    cuda32 = f"{LIB32}/libcuda.so.{V}"
    assert is_compat32(cuda32)
    assert capabilities_of(cuda32) == ("compute",)
    assert not keep_mount(cuda32, frozenset({"compute"}))
    assert not keep_mount(cuda32, frozenset({"compat32"}))
    assert keep_mount(cuda32, frozenset({"compute", "compat32"}))

    ml32 = f"/usr/lib32/libnvidia-ml.so.{V}"
    assert is_compat32(ml32)
    assert keep_mount(ml32, frozenset({"utility", "compat32"}))
    assert not keep_mount(ml32, frozenset({"compute", "compat32"}))

    unknown32 = f"{LIB32}/libnvidia-brand-new-thing.so.{V}"
    assert capabilities_of(unknown32) == ("compat32",)
    assert keep_mount(unknown32, frozenset({"compat32"}))
    assert not keep_mount(unknown32, ALL_CAPABILITIES - {"compat32"})

    for path in (
        f"{LIB}/libcuda.so.{V}",
        f"/usr/lib/libcuda.so.{V}",
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
    ):
        assert not is_compat32(path), path  # a plain /usr/lib is 64-bit on many distributions
    for directory in ("/usr/lib/i686-linux-gnu", "/usr/lib/arm-linux-gnueabihf", "/usr/lib32/nvidia"):
        assert is_compat32(f"{directory}/libcuda.so.{V}"), directory


def test_files_shared_by_two_capabilities_are_kept_for_either() -> None:
    gpucomp = f"{LIB}/libnvidia-gpucomp.so.{V}"
    assert capabilities_of(gpucomp) == ("compute", "graphics")
    assert keep_mount(gpucomp, frozenset({"compute"}))
    assert keep_mount(gpucomp, frozenset({"graphics"}))  # Vulkan and GL need the shader compiler
    assert not keep_mount(gpucomp, frozenset({"utility", "video"}))

    allocator = f"{LIB}/libnvidia-allocator.so.{V}"
    assert capabilities_of(allocator) == ("graphics", "compute")
    assert keep_mount(allocator, frozenset({"graphics"}))
    assert keep_mount(allocator, frozenset({"compute"}))


def test_display_brings_graphics_but_graphics_does_not_bring_the_x_server_modules() -> None:
    glx = f"{LIB}/libGLX_nvidia.so.{V}"
    xorg = f"{LIB}/nvidia/xorg/nvidia_drv.so"
    assert keep_mount(glx, frozenset({"display"}))
    assert keep_mount(xorg, frozenset({"display"}))
    assert keep_mount(glx, frozenset({"graphics"}))
    assert not keep_mount(xorg, frozenset({"graphics"}))
    assert effective_capabilities(frozenset({"display"})) == {"display", "graphics"}


def test_names_are_read_from_the_stem_before_so() -> None:
    assert capability_of("libcuda.so.1") == "compute"  # no directory
    assert capability_of("/tmp/nvidia-mps/") == "compute"  # trailing slash
    assert capability_of(f"{LIB}/libcudadebugger.so.1") == "compute"
    assert capability_of(f"{LIB}/libnvidia-ml.sock") is None  # .sock is not .so
    assert capability_of(f"{LIB}/libcuda-foo.so.1") is None  # exact stems, no loose prefixes
    assert capability_of(f"{LIB}/libnvidia-mlx.so.1") is None
    assert capability_of(f"{LIB}/libGLX_mesa.so.0") is None
    assert capability_of("") is None
    assert capability_of("/") is None
    assert capability_of("/etc/OpenCL/vendors/intel.icd") == "compute"


def test_select_mounts_keeps_the_order_and_the_objects() -> None:
    mounts = [to_data(Mount(host_path=p, container_path=p, options=list(RO))) for p, _ in DRIVER_FILES]
    kept = select_mounts(mounts, DEFAULT_CAPABILITIES)
    assert kept == [m for m in mounts if keep_mount(m["containerPath"], DEFAULT_CAPABILITIES)]
    assert all(any(k is m for m in mounts) for k in kept)
    assert [m["containerPath"] for m in kept] == [
        p for p, _ in DRIVER_FILES if p in {m["containerPath"] for m in kept}
    ]
    assert select_mounts([], ALL_CAPABILITIES) == []
    assert select_mounts(mounts, ALL_CAPABILITIES) == mounts


# --- the fake eight-GPU node's generated spec --------------------------------------------------------

# Mounts of the fake node's spec that belong to no capability, on purpose: the GSP firmware.
ALWAYS_KEPT = {f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin", f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin"}


@pytest.mark.root
def test_every_mount_of_a_generated_spec_is_classified(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    output = tmp_path / "nvidia.yaml"
    code = main(["cdi", "generate", *node.cli_args(), "--output", str(output)])
    _, err = capsys.readouterr()
    assert code == 0, err
    spec = load_spec(str(output))
    mounts = list(spec.container_edits.mounts)
    for device in spec.devices:
        mounts += device.container_edits.mounts
    paths = [m.container_path for m in mounts]
    assert len(paths) > 30
    unclassified = {p for p in paths if capability_of(p) is None}
    assert unclassified == ALWAYS_KEPT

    by_capability: dict[str, set[str]] = {}
    for path in paths:
        by_capability.setdefault(capability_of(path) or "-", set()).add(path.rsplit("/", 1)[-1])
    assert by_capability["compute"] >= {
        f"libcuda.so.{V}",
        "nvidia.icd",
        "nvidia-mps",
        "nvidia-cuda-mps-server",
    }
    assert by_capability["utility"] >= {f"libnvidia-ml.so.{V}", "nvidia-smi", "socket"}
    assert by_capability["graphics"] >= {f"libGLX_nvidia.so.{V}", "nvidia_icd.json", "10_nvidia.json"}
    assert by_capability["video"] >= {f"libnvcuvid.so.{V}", f"libvdpau_nvidia.so.{V}"}
    assert by_capability["display"] == {"nvidia_drv.so", f"libglxserver_nvidia.so.{V}"}

    data = [to_data(mount) for mount in mounts]
    default = {m["containerPath"].rsplit("/", 1)[-1] for m in select_mounts(data, DEFAULT_CAPABILITIES)}
    assert {f"libcuda.so.{V}", "nvidia-smi", f"libnvidia-gpucomp.so.{V}", "gsp_ga10x.bin"} <= default
    assert default.isdisjoint(
        {f"libGLX_nvidia.so.{V}", f"libnvcuvid.so.{V}", "nvidia_icd.json", "nvidia_drv.so", "nvoptix.bin"}
    )
    assert select_mounts(data, ALL_CAPABILITIES) == data
    assert select_mounts(data, frozenset()) == [m for m in data if m["containerPath"] in ALWAYS_KEPT]
