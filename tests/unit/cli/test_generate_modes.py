"""``cdictk cdi generate`` in the modes beside the GPU host's: wsl, csv, imex and the gated modes on
their fake nodes (tests/fakenode/platforms.py); auto's choice of platform; the non-GPU modes' own
class and output; --device-id where it applies; --check and --watch for every mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from cdictk.cdi.load import load_spec
from cdictk.cdi.model import Spec
from cdictk.cdi.validate import validate_file
from cdictk.cli.main import main
from cdictk.node.modes import Mode
from cdictk.nvcdi.nodespec import node_spec
from cdictk.nvcdi.options import SpecOptions
from cdictk.nvcdi.specfile import WatchedSpec
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import NodeFactory, PlatformFactory
from tests.fakenode.nvml import FakeGpu, FakeNvmlConfig, build_fake_nvml
from tests.fakenode.platforms import (
    CSV_DIR,
    JETSON_LIB,
    PLATFORMS,
    WSL_STORE,
    WSL_VERSION,
    PlatformNode,
)

RO = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
KINDS = {
    "wsl": "nvidia.com/gpu",
    "jetson": "nvidia.com/gpu",
    "imex": "nvidia.com/imex-channel",
    "nvswitch": "nvidia.com/nvswitch",
    "gds": "nvidia.com/gds",
    "mofed": "nvidia.com/mofed",
    "gdrcopy": "nvidia.com/gdrcopy",
}
OTHER_DRIVERS = ("imex", "nvswitch", "gds", "mofed", "gdrcopy")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["cdi", "generate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def write(capsys: pytest.CaptureFixture[str], node: PlatformNode, output: Path, *args: str) -> Spec:
    code, _, err = run(capsys, *node.cli_args(), "--mode", node.mode, "-o", str(output), *args)
    assert code == 0, err
    assert validate_file(str(output)).problems == []
    return load_spec(str(output))


def node_paths(spec: Spec, name: str) -> list[str]:
    device = next(d for d in spec.devices if d.name == name)
    return [node.path for node in device.container_edits.device_nodes]


def hook_args(spec: Spec) -> list[str]:
    (hook,) = spec.container_edits.hooks
    return hook.args[hook.args.index("batch") + 1 :]


@pytest.mark.root
def test_wsl(capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path) -> None:
    node = make_platform("wsl")
    output = tmp_path / "nvidia.yaml"
    code, _, err = run(capsys, *node.cli_args(), "--mode", "wsl", "-o", str(output))
    assert code == 0 and err.strip() == f"wrote {output} (cdiVersion 0.5.0, 1 devices, driver {WSL_VERSION})"
    spec = load_spec(str(output))
    assert (spec.kind, [d.name for d in spec.devices]) == ("nvidia.com/gpu", ["all"])
    (dxg,) = spec.devices[0].container_edits.device_nodes
    assert (dxg.path, dxg.host_path, dxg.major, dxg.minor) == ("/dev/dxg", node.root + "/dev/dxg", 10, 125)
    mounts = {m.container_path: m for m in spec.container_edits.mounts}
    assert sorted(mounts) == sorted(node.files)
    assert all(m.options == RO and m.host_path == node.root + m.container_path for m in mounts.values())
    assert spec.container_edits.device_nodes == []  # no /dev/nvidiactl on WSL
    assert spec.container_edits.env == ["NVIDIA_VISIBLE_DEVICES=void"]
    # The links and the ld cache; no CUDA compat and no driver params on WSL.
    assert hook_args(spec) == [
        "--link",
        f"{WSL_STORE}/nvidia-smi::/usr/bin/nvidia-smi",
        "--folder",
        WSL_STORE,
        "--folder",
        "/usr/lib/wsl/lib",
    ]


@pytest.mark.root
def test_jetson(capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path) -> None:
    node = make_platform("jetson")
    output = tmp_path / "nvidia.yaml"
    code, _, err = run(capsys, *node.cli_args(), "--mode", "csv", "-o", str(output))
    assert code == 0, err
    assert err.splitlines()[0] == (
        "cdictk: warning: not found, left out (optional): /dev/nvhost-nvdla*, "
        "/usr/lib/aarch64-linux-gnu/libv4l2.so.0.0.999999, /usr/lib/aarch64-linux-gnu/tegra-egl/libEGL_nvidia.so.0"
    )
    assert err.splitlines()[1] == f"wrote {output} (cdiVersion 0.5.0, 2 devices)"  # no driver version
    spec = load_spec(str(output))
    assert [d.name for d in spec.devices] == ["0", "all"]
    assert sorted(node_paths(spec, "0")) == sorted(node.nodes) and node_paths(spec, "all") == node_paths(
        spec, "0"
    )
    assert sorted(m.container_path for m in spec.container_edits.mounts) == sorted(node.files)
    pva = next(m for m in spec.container_edits.mounts if m.container_path == "/usr/share/nvidia/nvpva")
    assert pva.options == RO  # a directory of the driver's, read-only like its files
    assert hook_args(spec) == [
        "--link",
        f"libcuda.so.1.1::{JETSON_LIB}/libcuda.so",
        "--link",
        f"libcuda.so.1.1::{JETSON_LIB}/libcuda.so.1",
        "--link",
        f"libnvidia-ptxjitcompiler.so.540.4.0::{JETSON_LIB}/libnvidia-ptxjitcompiler.so.1",
        "--folder",
        JETSON_LIB,
    ]
    # Ignore patterns and given files.
    mine = tmp_path / "mine.csv"
    mine.write_text(f"dev, /dev/nvmap\nlib, {JETSON_LIB}/libnvrm_gpu.so\nlib, {JETSON_LIB}/libnvrm_mem.so\n")
    spec = write(
        capsys, node, tmp_path / "mine.yaml", "--csv.file", str(mine), "--csv.ignore-pattern", "**/*mem*"
    )
    assert node_paths(spec, "0") == ["/dev/nvmap"]
    assert [m.container_path for m in spec.container_edits.mounts] == [
        "/etc/nv_tegra_release",
        f"{JETSON_LIB}/libnvrm_gpu.so",
    ]


@pytest.mark.root
def test_a_malformed_csv_line_is_one_error_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path
) -> None:
    node = make_platform("jetson")
    drivers = Path(node.root + CSV_DIR, "drivers.csv")
    drivers.write_text(drivers.read_text() + "library, /usr/lib/libfoo.so\n")
    output = tmp_path / "nvidia.yaml"
    code, _, err = run(capsys, *node.cli_args(), "--mode", "csv", "-o", str(output))
    assert (code, err.strip()) == (
        1,
        f"cdictk: error: {drivers}:9: unknown type 'library' (dev, lib, sym or dir)",
    )
    assert not output.exists()


@pytest.mark.root
@pytest.mark.parametrize("name", OTHER_DRIVERS)
def test_other_drivers_get_their_own_class_and_spec_file(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path, name: str
) -> None:
    node = make_platform(name)
    output = tmp_path / f"{name}.yaml"
    code, _, err = run(capsys, *node.cli_args(), "--mode", name, "-o", str(output))
    assert (
        code == 0
        and err.strip() == f"wrote {output} (cdiVersion 0.5.0, {4 if name == 'imex' else 1} devices)"
    )
    spec = load_spec(str(output))
    assert spec.kind == KINDS[name]
    every = [n.path for d in spec.devices for n in d.container_edits.device_nodes if d.name == "all"]
    assert sorted(every) == sorted(node.nodes)
    for device in spec.devices:
        for device_node in device.container_edits.device_nodes:
            st = os.lstat(node.root + device_node.path)  # stat'ed, unlike NVIDIA's IMEX nodes
            assert (device_node.type, device_node.major, device_node.minor, device_node.file_mode) == (
                "c",
                os.major(st.st_rdev),
                os.minor(st.st_rdev),
                stat.S_IMODE(st.st_mode),
            )
    common = spec.container_edits
    assert (common.env, common.hooks, common.device_nodes) == (["NVIDIA_VISIBLE_DEVICES=void"], [], [])
    assert sorted(m.container_path for m in common.mounts) == sorted(node.files)
    # The default output is its own file, never the GPU spec; an explicit --class wins.
    code, _, err = run(capsys, *node.cli_args(), "--mode", name, "--check")
    assert (code, err.strip()) == (1, f"cdictk: /etc/cdi/nvidia-{name}.yaml: missing")
    spec = write(capsys, node, tmp_path / "gpu.yaml", "--class", "gpu", "--separate-hooks")
    assert spec.kind == "nvidia.com/gpu" and spec.container_edits.hooks == []


@pytest.mark.root
def test_imex_devices_by_channel(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path
) -> None:
    node = make_platform("imex")
    spec = write(capsys, node, tmp_path / "a.yaml")
    assert [d.name for d in spec.devices] == ["0", "1", "7", "all"]
    assert node_paths(spec, "7") == ["/dev/nvidia-caps-imex-channels/channel7"]
    spec = write(capsys, node, tmp_path / "b.yaml", "--device-id", "channel1", "--device-id", "7")
    assert [d.name for d in spec.devices] == ["1", "7", "all"]
    for bad, reason in (
        ("3", "--device-id: no such IMEX channel in " + node.root + "/dev/nvidia-caps-imex-channels: 3"),
        ("GPU-1", "--device-id: not an IMEX channel (N or channelN, N <= 1048575): GPU-1"),
    ):
        code, _, err = run(capsys, *node.cli_args(), "--mode", "imex", "-o", "-", "--device-id", bad)
        assert (code, err.strip()) == (1, f"cdictk: error: {reason}")


@pytest.mark.parametrize("name", ["wsl", "nvswitch", "gds", "mofed", "gdrcopy"])
def test_device_id_where_there_is_one_all_device_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    code, _, err = run(capsys, "--driver-root", str(tmp_path), "--mode", name, "-o", "-", "--device-id", "0")
    assert (code, err.strip()) == (
        1,
        f"cdictk: error: --device-id: does not apply to --mode {name} (one 'all' device)",
    )


@pytest.mark.root
def test_jetson_device_ids(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path
) -> None:
    node = make_platform("jetson")
    spec = write(
        capsys, node, tmp_path / "a.yaml", "--device-id", "0", "--device-name-strategy", "type-index"
    )
    assert [d.name for d in spec.devices] == ["gpu0", "all"]
    code, _, err = run(capsys, *node.cli_args(), "--mode", "csv", "-o", "-", "--device-id", "1")
    assert (code, err.strip()) == (
        1,
        "cdictk: error: --device-id: a Jetson has device 0 (or all) only, not 1",
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("nvswitch", "no NVSwitch nodes (/dev/nvidia-nvswitchctl, /dev/nvidia-nvswitch*) under {root}"),
        ("gds", "no GPUDirect Storage (nvidia-fs) nodes (/dev/nvidia-fs*) under {root}"),
        (
            "mofed",
            "no InfiniBand (MOFED) nodes (/dev/infiniband/uverbs*, /dev/infiniband/rdma_cm) under {root}",
        ),
        ("gdrcopy", "no GDRCopy nodes (/dev/gdrdrv) under {root}"),
        ("imex", "no IMEX channels in {root}/dev/nvidia-caps-imex-channels (is nvidia-imex set up?)"),
        (
            "wsl",
            "no NVIDIA driver store: no libcuda.so.1.1 in {root}/usr/lib/wsl/drivers/*/ (is the Windows "
            "NVIDIA driver installed?)",
        ),
        (
            "csv",
            "--csv.file: no CSV files (looked for {root}"
            + CSV_DIR
            + "/devices.csv, {root}"
            + CSV_DIR
            + "/drivers.csv, {root}"
            + CSV_DIR
            + "/l4t.csv)",
        ),
    ],
)
def test_nothing_found_is_one_error_and_nothing_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, reason: str
) -> None:
    root = tmp_path / "empty"
    (root / "dev").mkdir(parents=True)
    output = tmp_path / "out.yaml"
    code, _, err = run(capsys, "--driver-root", str(root), "--mode", name, "-o", str(output))
    assert (code, err.strip()) == (1, "cdictk: error: " + reason.format(root=root))
    assert not output.exists()


@pytest.mark.root
def test_wsl_without_dxg_is_an_error(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory
) -> None:
    node = make_platform("wsl")
    Path(node.root, "dev/dxg").unlink()
    code, _, err = run(capsys, *node.cli_args(), "--mode", "wsl", "-o", "-")
    assert (code, err.strip()) == (
        1,
        f"cdictk: error: no {node.root}/dev/dxg: this WSL2 distribution has no GPU (GPU support off?)",
    )


def test_csv_options_need_the_csv_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--driver-root", str(tmp_path), "--mode", "nvml", "--csv.file", "x.csv")
    assert (code, err.strip()) == (
        1,
        "cdictk: error: --csv.file: applies to --mode csv (or auto on a Jetson), not nvml",
    )


@pytest.mark.root
def test_auto_picks_wsl_and_csv_by_platform(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path
) -> None:
    for name, devices in (("wsl", ["all"]), ("jetson", ["0", "all"])):
        node = make_platform(name)
        code, _, err = run(capsys, *node.cli_args(), "-o", str(tmp_path / f"{name}.yaml"))
        assert code == 0, err
        assert "warning" not in err.replace("warning: not found, left out (optional)", "")  # no guess
        assert [d.name for d in load_spec(str(tmp_path / f"{name}.yaml")).devices] == devices


@pytest.mark.root
def test_auto_on_a_jetson_whose_nvml_reports_discrete_gpus_uses_nvml_and_says_it_guessed(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    Path(node.root, "etc/nv_tegra_release").write_text("# R36 (release), REVISION: 4.3\n")
    code, _, err = run(capsys, *node.cli_args(), "-o", str(tmp_path / "nvidia.yaml"))
    assert code == 0
    assert err.splitlines()[0] == (
        "cdictk: warning: a Jetson (Tegra) whose NVML reports discrete GPUs only: generating for them "
        "with NVML; --mode csv writes its integrated GPU from the CSV files"
    )
    assert next(d.name for d in load_spec(str(tmp_path / "nvidia.yaml")).devices) == "0"


@pytest.mark.root
def test_auto_on_a_jetson_whose_nvml_reports_its_integrated_gpu_uses_the_csv_files(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, stub_cache: str, tmp_path: Path
) -> None:
    """JetPack 6 has NVML, which names the iGPU "Orin (nvgpu)": NVIDIA's rule, no guess."""
    node = make_platform("jetson")
    library = build_fake_nvml(node.root + JETSON_LIB, "540.4.0", cache_dir=stub_cache)
    os.rename(library, node.root + JETSON_LIB + "/libnvidia-ml.so.1")
    orin = FakeGpu(0, 0, "GPU-00000000-0000-0000-0000-000000000000", "00000000:00:00.0", "Orin (nvgpu)")
    FakeNvmlConfig("540.4.0", 12060, [orin], []).write(node.root + JETSON_LIB)
    code, _, err = run(capsys, *node.cli_args(), "-o", str(tmp_path / "nvidia.yaml"))
    assert code == 0, err
    assert "NVML" not in err
    assert [d.name for d in load_spec(str(tmp_path / "nvidia.yaml")).devices] == ["0", "all"]


def _change(name: str, node: PlatformNode) -> None:
    """A change of the node that the mode's spec must follow."""
    root = node.root
    changes: dict[str, Callable[[], object]] = {
        "wsl": lambda: Path(root + WSL_STORE, "libnvidia-opticalflow.so.1").write_bytes(b"\x7fELF"),
        "jetson": lambda: Path(root + CSV_DIR, "devices.csv").write_text("dev, /dev/nvmap\n"),
        "imex": lambda: os.mknod(
            f"{root}/dev/nvidia-caps-imex-channels/channel9", stat.S_IFCHR, os.makedev(507, 9)
        ),
        "nvswitch": lambda: Path(root, "dev/nvidia-nvswitch3").unlink(),
        "gds": lambda: os.mknod(f"{root}/dev/nvidia-fs2", stat.S_IFCHR, os.makedev(508, 2)),
        "mofed": lambda: Path(root, "dev/infiniband/uverbs1").unlink(),
        "gdrcopy": lambda: os.chmod(f"{root}/dev/gdrdrv", 0o660),
    }
    changes[name]()


@pytest.mark.root
@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_check_for_every_mode(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path, name: str
) -> None:
    node = make_platform(name)
    output = tmp_path / "spec.yaml"
    write(capsys, node, output)
    code, _, err = run(capsys, *node.cli_args(), "--mode", node.mode, "-o", str(output), "--check")
    assert code == 0 and f"{output}: up to date" in err
    _change(name, node)
    code, _, err = run(capsys, *node.cli_args(), "--mode", node.mode, "-o", str(output), "--check")
    assert (code, err.strip().splitlines()[-1]) == (
        1,
        f"cdictk: {output}: stale: differs from a fresh generation",
    )


@pytest.mark.root
@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_watch_for_every_mode(make_platform: PlatformFactory, tmp_path: Path, name: str) -> None:
    """What --watch runs every interval: the fingerprint notices the change, the spec follows it."""
    node = make_platform(name)
    roots = Roots.from_options(node.root, None, node.proc, node.sys)
    output = tmp_path / "spec.yaml"
    csv = Path(node.root + CSV_DIR, "devices.csv")
    said: list[str] = []
    watched = WatchedSpec(
        lambda: node_spec(roots, Mode(node.mode), SpecOptions(cls="watched"), where=str(output)),
        roots=roots,
        output=str(output),
        fmt="yaml",
        say=said.append,
        warn=said.append,
        inputs=(str(csv),),
    )
    first = watched.fingerprint()
    watched.regenerate()
    before = output.read_bytes()
    assert watched.fingerprint() == first
    _change(name, node)
    assert watched.fingerprint() != first
    watched.regenerate()
    assert output.read_bytes() != before
    assert sum(line.startswith(f"wrote {output} (") for line in said) == 2  # once, then after the change


@pytest.mark.root
def test_a_jetson_library_gets_its_soname_link_where_the_host_and_the_csv_lack_it(
    capsys: pytest.CaptureFixture[str], make_platform: PlatformFactory, tmp_path: Path
) -> None:
    node = make_platform("jetson")
    Path(node.root + JETSON_LIB, "libcuda.so.1").unlink()
    drivers = Path(node.root + CSV_DIR, "drivers.csv")
    drivers.write_text(drivers.read_text().replace(f"sym, {JETSON_LIB}/libcuda.so.1\n", ""))
    spec = write(capsys, node, tmp_path / "spec.yaml")
    args = hook_args(spec)
    links = [args[i + 1] for i, arg in enumerate(args) if arg == "--link"]
    assert links == [
        f"libcuda.so.1.1::{JETSON_LIB}/libcuda.so",  # the CSV's sym entry, as the host has it
        f"libcuda.so.1.1::{JETSON_LIB}/libcuda.so.1",  # the SONAME link ld.so opens, made by us
        f"libnvidia-ptxjitcompiler.so.540.4.0::{JETSON_LIB}/libnvidia-ptxjitcompiler.so.1",
    ]
