"""`cdictk cdi generate` on fake GPU nodes: whole specs, flags, stale checks and failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdictk.cdi.load import load_spec
from cdictk.cdi.model import ContainerEdits, Device, Spec
from cdictk.cdi.validate import validate_file
from cdictk.cli.main import main
from cdictk.nvcdi.hooks import entry_file
from tests.conftest import NodeFactory
from tests.fakenode.node import LIB_DIR, FakeNode, mig_cap_minor

V = "580.95.05"
RO = ["ro", "nosuid", "nodev", "rbind", "rprivate"]


def generate(capsys: pytest.CaptureFixture[str], node: FakeNode, *args: str) -> tuple[int, str, str]:
    code = main(["cdi", "generate", *node.cli_args(), *args])
    out, err = capsys.readouterr()
    return code, out, err


def write_spec(capsys: pytest.CaptureFixture[str], node: FakeNode, tmp_path: Path, *args: str) -> Spec:
    output = tmp_path / "cdi" / "nvidia.yaml"
    code, _, err = generate(capsys, node, "--output", str(output), *args)
    assert code == 0, err
    assert validate_file(str(output)).problems == []
    return load_spec(str(output))


def device(spec: Spec, name: str) -> Device:
    return next(d for d in spec.devices if d.name == name)


def node_paths(edits: ContainerEdits) -> list[str]:
    return [n.path for n in edits.device_nodes]


def mount_paths(edits: ContainerEdits) -> dict[str, list[str]]:
    return {m.container_path: m.options for m in edits.mounts}


@pytest.mark.root
def test_single_gpu_spec(capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("single")
    spec = write_spec(capsys, node, tmp_path)
    uuid = node.preset.gpus[0].uuid
    assert spec.kind == "nvidia.com/gpu"
    assert spec.cdi_version == "0.7.0"  # the render node's group needs additionalGids
    assert [d.name for d in spec.devices] == ["0", uuid, "all"]
    gpu = device(spec, "0").container_edits
    assert node_paths(gpu) == ["/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128"]
    first = gpu.device_nodes[0]
    assert (first.host_path, first.type, first.major, first.minor, first.file_mode) == (
        node.root + "/dev/nvidia0",
        "c",
        195,
        0,
        0o666,
    )
    assert first.gid is None and first.uid is None
    assert gpu.additional_gids == [44, 105]
    assert gpu.hooks == []  # the batched common hook makes the by-path links of the devices present
    assert device(spec, uuid).container_edits == gpu

    common = spec.container_edits
    assert node_paths(common) == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidiactl",
    ]
    mounts = mount_paths(common)
    for path in (
        f"{LIB_DIR}/libcuda.so.{V}",
        f"{LIB_DIR}/libnvidia-ml.so.{V}",
        f"{LIB_DIR}/vdpau/libvdpau_nvidia.so.{V}",
        f"{LIB_DIR}/libnvidia-api.so.1",
        f"{LIB_DIR}/libnvidia-egl-gbm.so.1.1.2",
        f"{LIB_DIR}/nvidia/xorg/nvidia_drv.so",
        "/usr/bin/nvidia-smi",
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/etc/OpenCL/vendors/nvidia.icd",
    ):
        assert mounts.pop(path) == RO, path
    # Links are made by the hook, never mounted; other libraries and old drivers' files are left alone.
    assert not [p for p in mounts if "libfoo" in p or "550.54.15" in p or p.endswith("libnvidia-ml.so.1")]
    assert common.mounts[0].host_path.startswith(node.root)
    assert common.env == [f"NVIDIA_CTK_LIBCUDA_DIR={LIB_DIR}", "NVIDIA_VISIBLE_DEVICES=void"]

    (hook,) = common.hooks
    assert hook.hook_name == "createContainer"
    assert hook.path == sys.executable and os.path.isabs(hook.path)
    assert hook.args[:5] == [sys.executable, "-I", "-S", entry_file(), "batch"]
    assert os.path.isfile(hook.args[3]) and hook.env
    args = hook.args[5:]
    assert f"libcuda.so.{V}::{LIB_DIR}/libcuda.so.1" in args
    assert f"libcuda.so.1::{LIB_DIR}/libcuda.so" in args
    device_links = [args[i + 1] for i, arg in enumerate(args) if arg == "--device-link"]
    assert device_links == [
        "../card1::/dev/dri/by-path/pci-0000:18:00.0-card",
        "../renderD128::/dev/dri/by-path/pci-0000:18:00.0-render",
    ]
    assert args[-7:] == [
        f"--host-driver-version={V}",
        "--folder",
        LIB_DIR,
        "--folder",
        f"{LIB_DIR}/vdpau",
        "--disable-device-node-modification",
        "--update-application-profile",
    ]
    separate = write_spec(capsys, node, tmp_path, "--separate-hooks")
    assert [h.args[4] for h in separate.container_edits.hooks] == [
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
        "disable-device-node-modification",
        "update-application-profile",
    ]
    assert device(separate, "0").container_edits.hooks[0].args[-4:] == [
        "--link",
        "../card1::/dev/dri/by-path/pci-0000:18:00.0-card",
        "--link",
        "../renderD128::/dev/dri/by-path/pci-0000:18:00.0-render",
    ]


@pytest.mark.root
def test_eight_gpus_with_mig(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    spec = write_spec(capsys, node, tmp_path)
    names = [d.name for d in spec.devices]
    gpus, migs = node.preset.gpus, node.preset.migs
    assert names == [
        "0:0",
        "0:1",
        "0:2",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        *(g.uuid for g in gpus[1:]),
        *(m.uuid for m in migs),
        "all",
    ]
    assert "0" not in names and gpus[0].uuid not in names  # a GPU in MIG mode is not a device itself
    mig = device(spec, "0:1").container_edits
    assert node_paths(mig) == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{mig_cap_minor(0, 7)}",
        f"/dev/nvidia-caps/nvidia-cap{mig_cap_minor(0, 7, 0)}",
    ]
    assert device(spec, migs[1].uuid).container_edits == mig
    every = node_paths(device(spec, "all").container_edits)
    assert {f"/dev/nvidia{i}" for i in range(8)} <= set(every)
    assert len(every) == len(set(every)) == 8 + 6 + 7 * 2
    assert "/dev/nvidia-nvswitchctl" not in every
    mounts = mount_paths(spec.container_edits)
    ipc = [
        "ro",
        "nosuid",
        "nodev",
        "rbind",
        "rprivate",
        "noexec",
    ]  # read-only: tests/unit/nvcdi/test_edits.py
    assert mounts["/run/nvidia-persistenced/socket"] == ipc
    assert mounts["/tmp/nvidia-mps"] == ipc


@pytest.mark.root
def test_output_is_deterministic_and_unchanged_specs_are_not_rewritten(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    output = tmp_path / "cdi" / "nvidia.yaml"  # the directory is created
    assert generate(capsys, node, "-o", str(output))[0] == 0
    before = output.read_bytes()
    stat = output.stat()
    assert oct(stat.st_mode & 0o777) == "0o644"
    code, _, err = generate(capsys, node, "-o", str(output))
    assert code == 0 and "unchanged" in err
    assert output.read_bytes() == before and output.stat().st_ino == stat.st_ino
    code, out, _ = generate(capsys, node, "-o", "-")
    assert code == 0 and out.encode() == before
    assert os.listdir(output.parent) == ["nvidia.yaml"]  # no temporary file left behind


@pytest.mark.root
def test_check_reports_stale_specs(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    output = tmp_path / "nvidia.yaml"
    code, _, err = generate(capsys, node, "-o", str(output), "--check")
    assert (code, err.splitlines()[-1]) == (1, f"cdictk: {output}: missing")
    assert not output.exists()
    generate(capsys, node, "-o", str(output))
    code, _, err = generate(capsys, node, "-o", str(output), "--check")
    assert code == 0 and "up to date" in err
    # A MIG reconfiguration: the spec on disk no longer matches the node.
    config = node.nvml_config()
    config.migs = config.migs[:1]
    node.write_nvml_config(config)
    before = output.read_bytes()
    code, _, err = generate(capsys, node, "-o", str(output), "--check")
    assert (code, err.splitlines()[-1]) == (1, f"cdictk: {output}: stale: differs from a fresh generation")
    assert output.read_bytes() == before


@pytest.mark.root
def test_json_format(capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.json"
    assert generate(capsys, node, "-o", str(output))[0] == 0
    data: dict[str, Any] = json.loads(output.read_text())
    assert data["kind"] == "nvidia.com/gpu"
    code, out, _ = generate(capsys, node, "-o", "-", "--format", "json")
    assert code == 0 and json.loads(out) == data


@pytest.mark.root
def test_naming_selection_and_hooks_flags(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    spec = write_spec(
        capsys,
        node,
        tmp_path,
        "--device-name-strategy",
        "type-index",
        "--device-id",
        "1",
        "--device-id",
        "0:2",
        "--no-all-device",
        "--disable-hook",
        "update-ldcache",
        "--hook-path",
        "/usr/bin/nvidia-cdi-hook",
        "--vendor",
        "example.com",
        "--class",
        "accel",
    )
    assert spec.kind == "example.com/accel"
    assert [d.name for d in spec.devices] == ["gpu1", "mig0:2"]
    assert [h.args[:2] for h in spec.container_edits.hooks] == [
        ["nvidia-cdi-hook", "create-symlinks"],
        ["nvidia-cdi-hook", "enable-cuda-compat"],
        ["nvidia-cdi-hook", "disable-device-node-modification"],
        ["nvidia-cdi-hook", "update-application-profile"],
    ]
    spec = write_spec(capsys, node, tmp_path, "--disable-hook", "all", "--device-id", "0")
    assert [d.name for d in spec.devices] == ["0:0", "0:1", "0:2", *(m.uuid for m in node.preset.migs), "all"]
    assert spec.container_edits.hooks == [] and all(not d.container_edits.hooks for d in spec.devices)


@pytest.mark.root
def test_older_cdi_version(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    code, _, err = generate(capsys, node, "-o", str(output), "--cdi-version", "0.5.0")
    assert code == 0
    assert "cdictk: warning: cdiVersion 0.5.0 has no additionalGids: left out" in err
    spec = load_spec(str(output))
    assert spec.cdi_version == "0.5.0" and all(not d.container_edits.additional_gids for d in spec.devices)
    code, _, err = generate(capsys, node, "-o", str(tmp_path / "old.yaml"), "--cdi-version", "0.4.0")
    assert code == 1 and "which 0.4.0 cannot express" in err
    assert not (tmp_path / "old.yaml").exists()


@pytest.mark.root
def test_management_mode(capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("eight")
    spec = write_spec(capsys, node, tmp_path, "--mode", "management")
    assert [d.name for d in spec.devices] == ["all"]
    paths = node_paths(spec.devices[0].container_edits)
    assert "/dev/nvidia7" in paths and "/dev/nvidia-caps/nvidia-cap1" in paths
    assert "/dev/nvidia-nvswitchctl" not in paths
    (hook,) = spec.container_edits.hooks
    assert "--folder" in hook.args and "--disable-device-node-modification" not in hook.args


@pytest.mark.root
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vendor", "bad vendor"], "--vendor: "),
        (["--vendor", "my_vendor.com"], '--vendor: invalid vendor "my_vendor.com": the CDI specification'),
        (["--class", "c" * 64], "--class: invalid class: 64 characters, over the CDI specification's limit"),
        (["--disable-hook", "nope"], "--disable-hook: unknown hook 'nope'"),
        (["--device-id", "9"], "--device-id: no such GPU or MIG device: 9"),
        (["--hook-path", "relative/hook"], "--hook-path: must be an absolute path"),
        (["--cdi-version", "9.9.9"], "--cdi-version: unknown version '9.9.9'"),
    ],
)
def test_bad_flags(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path, args: list[str], message: str
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    code, out, err = generate(capsys, node, "-o", str(output), *args)
    assert code == 1 and out == ""
    assert err.startswith("cdictk: error: ") and message in err and err.count("\n") == 1
    assert not output.exists()


def test_node_without_gpus_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "proc").mkdir(parents=True)
    output = tmp_path / "nvidia.yaml"
    args = ["--driver-root", str(empty), "--proc-root", str(empty / "proc"), "--sys-root", str(empty / "sys")]
    code = main(["cdi", "generate", *args, "--mode", "procfs", "-o", str(output)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(
        "cdictk: error: no NVIDIA driver found: no /proc/driver/nvidia/version"
    )
    assert not output.exists()


@pytest.mark.root
def test_unwritable_output_leaves_the_old_spec(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    target = tmp_path / "ro"
    target.mkdir()
    (target / "nvidia.yaml").write_text("old\n")
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(target)], check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN) to make a read-only directory")
    try:
        (target / "nvidia.yaml").write_text("old\n")
        subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        code, _, err = generate(capsys, node, "-o", str(target / "nvidia.yaml"))
        assert code == 1 and "cannot create a temporary file: Read-only file system" in err
        assert (target / "nvidia.yaml").read_text() == "old\n"
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_help_explains() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cdictk", "cdi", "generate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for flag in ("--output", "--driver-root", "--mode", "--device-name-strategy", "--check", "--cdi-version"):
        assert flag in result.stdout


@pytest.mark.root
def test_missing_optional_files_are_one_warning(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    code, _, err = generate(capsys, node, "-o", str(output))
    assert code == 0
    assert err.splitlines() == [
        "cdictk: warning: not found, left out (optional): nvidia-imex, nvidia-imex-ctl",
        f"wrote {output} (cdiVersion 0.7.0, 3 devices, driver {V})",
    ]
    for name in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"):
        os.unlink(f"{node.root}/usr/bin/{name}")
    for name in os.listdir(f"{node.root}/lib/firmware/nvidia/{V}"):
        os.unlink(f"{node.root}/lib/firmware/nvidia/{V}/{name}")
    code, _, err = generate(capsys, node, "-o", str(output))
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert code == 0 and warnings == [
        "cdictk: warning: not found, left out (optional): nvidia-smi, nvidia-debugdump, nvidia-persistenced, "
        f"nvidia-imex, nvidia-imex-ctl, GSP firmware for {V}"
    ]


@pytest.mark.root
def test_separate_dev_root(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    """Device nodes under --dev-root, the driver's files under --driver-root (a driver container)."""
    node = make_node("single")
    dev_root = tmp_path / "devroot"
    dev_root.mkdir()
    os.rename(f"{node.root}/dev", dev_root / "dev")
    spec = write_spec(capsys, node, tmp_path, "--dev-root", str(dev_root))
    nodes = device(spec, "0").container_edits.device_nodes
    assert (nodes[0].path, nodes[0].host_path) == ("/dev/nvidia0", f"{dev_root}/dev/nvidia0")
    assert spec.container_edits.device_nodes[-1].host_path == f"{dev_root}/dev/nvidiactl"
    libcuda = next(m for m in spec.container_edits.mounts if m.container_path.endswith(f"libcuda.so.{V}"))
    assert libcuda.host_path == f"{node.root}{LIB_DIR}/libcuda.so.{V}"


@pytest.mark.root
def test_nvidias_flag_spellings_are_accepted_as_they_are(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    """Scripts written for nvidia-ctk cdi generate keep working: its aliases mean what ours mean."""
    node = make_node("single")
    ours = generate(
        capsys,
        node,
        "--mode",
        "nvml",
        "--vendor",
        "example.com",
        "--class",
        "dev",
        "--device-id",
        "0",
        "--disable-hook",
        "update-ldcache",
        "--hook-path",
        "/usr/bin/nvidia-cdi-hook",
        "-o",
        "-",
    )
    theirs = generate(
        capsys,
        node,
        "--discovery-mode",
        "nvml",
        "--cdi-vendor",
        "example.com",
        "--cdi-class",
        "dev",
        "--device",
        "0",
        "--disable-hooks",
        "update-ldcache",
        "--nvidia-cdi-hook-path",
        "/usr/bin/nvidia-cdi-hook",
        "-o",
        "-",
    )
    assert ours[0] == theirs[0] == 0, ours[2] + theirs[2]
    assert ours[1] == theirs[1] and "kind: example.com/dev" in ours[1]
    assert (
        generate(
            capsys,
            node,
            "--devices",
            "0",
            "--device-ids",
            "0",
            "--nvidia-ctk-path",
            "/usr/bin/nvidia-ctk",
            "-o",
            "-",
        )[0]
        == 0
    )
