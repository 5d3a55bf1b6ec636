"""Awkward nodes and awkward flags: each ends in a correct spec with a warning, or in one clear error."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.cdi.load import load_spec
from cdictk.cli.main import main
from cdictk.node.libraries import candidate_dirs, find_driver_libraries, version_from_libraries
from cdictk.nvcdi.hooks import entry_file, hook_program
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import NodeFactory
from tests.fakenode.node import LIB_DIR, FakeNode
from tests.fakenode.planted import USER, plant, ran, relist, user_lib_dir

V = "580.95.05"


def roots_of(node: FakeNode) -> Roots:
    return Roots(driver=node.root, dev=node.root, proc=node.proc, sys=node.sys)


def generate(capsys: pytest.CaptureFixture[str], node: FakeNode, *args: str) -> tuple[int, str, str]:
    code = main(["cdi", "generate", *node.cli_args(), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.root
def test_two_files_sharing_a_missing_soname_link_give_one_link_to_the_newest(make_node: NodeFactory) -> None:
    node = make_node("single")
    shutil.copy(
        f"{node.lib_dir}/libnvidia-egl-wayland.so.1.1.19", f"{node.lib_dir}/libnvidia-egl-wayland.so.1.1.9"
    )
    os.unlink(f"{node.lib_dir}/libnvidia-egl-wayland.so.1")
    roots = roots_of(node)
    scan = find_driver_libraries(roots, V, candidate_dirs(roots, []))
    wayland = [(t, link) for t, link in scan.links if link.endswith("libnvidia-egl-wayland.so.1")]
    assert wayland == [("libnvidia-egl-wayland.so.1.1.19", f"{LIB_DIR}/libnvidia-egl-wayland.so.1")]
    assert scan.links == sorted(scan.links)


@pytest.mark.root
def test_absolute_links_in_the_driver_root_never_reach_host_files(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    # A socket outside the node, and the node's /var/run pointing at it by an absolute link: that link
    # means <root>/host-run, which does not exist, so nothing may be mounted.
    outside = tmp_path / "host-run" / "nvidia-persistenced"
    outside.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(outside / "socket"))
    os.makedirs(f"{node.root}/var", exist_ok=True)
    os.symlink(str(tmp_path / "host-run"), f"{node.root}/var/run")
    os.makedirs(f"{node.root}/usr/lib64", exist_ok=True)
    os.symlink(str(tmp_path / "host-run"), f"{node.root}/usr/lib64/xorg")
    from cdictk.node import driverfiles

    found = driverfiles.Found()
    driverfiles.find_ipc(roots_of(node), found)
    assert found.files == []
    # The same link made relative to the root's own /run is followed inside the root.
    os.unlink(f"{node.root}/var/run")
    os.symlink("/run", f"{node.root}/var/run")
    os.makedirs(f"{node.root}/run/nvidia-persistenced")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(f"{node.root}/run/nvidia-persistenced/socket")
    driverfiles.find_ipc(roots_of(node), found)
    assert [(f.path, f.host_path) for f in found.files] == [
        ("/run/nvidia-persistenced/socket", f"{node.root}/run/nvidia-persistenced/socket")
    ]


@pytest.mark.root
def test_names_a_spec_cannot_carry_are_left_out_with_a_warning(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    Path(os.fsdecode(os.fsencode(node.lib_dir) + b"/libnvidia-\xff.so.1")).write_bytes(
        Path(node.lib_dir, "libnvidia-api.so.1").read_bytes()
    )
    code, out, err = generate(capsys, node, "-o", "-")
    assert code == 0 and "libnvidia-" in out and "\\xff" not in out
    assert (
        "left out, names a spec cannot carry (not UTF-8, or '::'): " + LIB_DIR + "/libnvidia-\\udcff.so.1"
        in err
    )


@pytest.mark.root
def test_mig_gpu_without_mig_devices_is_reported(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("eight")
    config = node.nvml_config()
    config.migs = []
    node.write_nvml_config(config)
    code, out, err = generate(capsys, node, "-o", "-")
    assert code == 0 and 'name: "1"' in out
    uuid = node.preset.gpus[0].uuid
    assert f"GPU 0 ({uuid}) is in MIG mode without MIG devices: left out" in err


@pytest.mark.root
def test_procfs_gpu_without_uuid_keeps_its_index_name(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    info = Path(node.proc, "driver/nvidia/gpus/0000:18:00.0/information")
    info.write_text("".join(line for line in info.read_text().splitlines(True) if "UUID" not in line))
    code, out, err = generate(capsys, node, "-o", "-", "--mode", "procfs")
    assert code == 0 and '- name: "0"' in out
    assert "GPU 0 has no UUID (procfs did not list one): no uuid name for it" in err


@pytest.mark.root
def test_a_gpu_pynvml_cannot_decode_is_left_out_not_papered_over_with_procfs(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory
) -> None:
    node = make_node("single")
    conf = Path(node.lib_dir, "fake-nvml.conf")
    conf.write_bytes(conf.read_bytes().replace(b'name="NVIDIA H100 80GB HBM3"', b'name="bad\xff"'))
    code, _, err = generate(capsys, node, "-o", "-")
    assert code == 1 and "falling back" not in err
    assert err.startswith("cdictk: error: no NVIDIA GPUs found (nvml); NVML could not describe GPU 0: ")


@pytest.mark.root
def test_a_hung_nvml_ends_generate_within_its_deadline_and_keeps_the_spec(
    capsys: pytest.CaptureFixture[str],
    make_node: NodeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvmlInit that never returns (a driver stuck after Xid errors) must not hang generate."""
    import time

    from cdictk.node import nvmlchild

    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    assert generate(capsys, node, "-o", str(output))[0] == 0
    before = output.read_bytes()
    config = node.nvml_config()
    config.init_hang = True
    node.write_nvml_config(config)
    monkeypatch.setattr(nvmlchild, "NVML_DEADLINE", 1.0)  # the one NVML runner's
    started = time.monotonic()
    code, _, err = generate(capsys, node, "-o", str(output))
    assert time.monotonic() - started < 10
    assert code == 1 and err.count("\n") == 1 and "no answer within 1 s: the driver may be hung" in err
    assert output.read_bytes() == before


@pytest.mark.root
def test_driver_version_prefers_the_library_libcuda_so_1_points_at(make_node: NodeFactory) -> None:
    node = make_node("single")
    shutil.copy(f"{node.lib_dir}/libcuda.so.{V}", f"{node.lib_dir}/libcuda.so.999.1.1")
    roots = roots_of(node)
    assert version_from_libraries(roots, candidate_dirs(roots, [])) == V
    os.unlink(f"{node.lib_dir}/libcuda.so.1")
    assert version_from_libraries(roots, candidate_dirs(roots, [])) == "999.1.1"


def test_default_hook_program_is_isolated_whatever_the_interpreter_is_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "executable", "/opt/py/bin/python3.11-dbg")
    assert hook_program().prefix == ("/opt/py/bin/python3.11-dbg", "-I", "-S", entry_file())
    monkeypatch.setattr(sys, "executable", "")
    with pytest.raises(Exception, match="this Python's own path is unknown"):
        hook_program()


@pytest.mark.root
def test_output_that_is_not_a_regular_file_is_refused_without_hanging(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    code, _, err = generate(capsys, node, "-o", str(fifo))
    assert (code, err.splitlines()[-1]) == (
        1,
        f"cdictk: error: {fifo}: not a regular file (use --output - for stdout)",
    )
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "elsewhere.yaml")
    assert generate(capsys, node, "-o", str(link))[0] == 1
    assert not (tmp_path / "elsewhere.yaml").exists()


@pytest.mark.root
def test_relative_roots_give_absolute_host_paths(
    capsys: pytest.CaptureFixture[str],
    make_node: NodeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = make_node("single")
    monkeypatch.chdir(os.path.dirname(node.root))
    name = os.path.basename(node.root)
    output = tmp_path / "nvidia.yaml"
    args = [
        "--driver-root",
        name,
        "--proc-root",
        f"{name}/proc",
        "--sys-root",
        f"{name}/sys",
        "-o",
        str(output),
    ]
    assert main(["cdi", "generate", *args]) == 0
    spec = load_spec(str(output))
    assert spec.devices[0].container_edits.device_nodes[0].host_path == f"{node.root}/dev/nvidia0"
    result = subprocess.run(
        [sys.executable, "-m", "cdictk", "cdi", "validate", str(output)], capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.root
def test_unchanged_spec_with_the_wrong_mode_is_rewritten_0644(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    generate(capsys, node, "-o", str(output))
    os.chmod(output, 0o600)
    code, _, err = generate(capsys, node, "-o", str(output))
    assert code == 0 and "wrote" in err and (output.stat().st_mode & 0o777) == 0o644


@pytest.mark.root
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "management", "--device-id", "0"], "--device-id: does not apply to --mode management"),
        (["--ldconfig-path", "sbin/ldconfig"], "--ldconfig-path: must be an absolute path"),
    ],
)
def test_flags_that_do_not_fit(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, args: list[str], message: str
) -> None:
    code, _, err = generate(capsys, make_node("single"), "-o", "-", *args)
    assert code == 1 and message in err


@pytest.mark.root
def test_output_name_runtimes_would_ignore_is_warned_about(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    code, _, err = generate(capsys, node, "-o", str(tmp_path / "nvidia.yml"))
    assert code == 0 and "CDI runtimes only load .yaml and .json files from their spec directories" in err


@pytest.mark.root
def test_output_under_new_directories_is_never_world_writable_under_umask_000(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")  # built under 022: a node of 0777 directories has nothing to mount
    output = tmp_path / "a" / "b" / "cdi" / "nvidia.yaml"
    old = os.umask(0)
    try:
        code, _, err = generate(capsys, node, "-o", str(output))
    finally:
        left = os.umask(old)
    assert code == 0, err
    made = [tmp_path / "a", tmp_path / "a" / "b", output.parent]
    assert [oct(path.stat().st_mode & 0o7777) for path in made] == ["0o755"] * 3
    assert oct(output.stat().st_mode & 0o7777) == "0o644"
    assert left == 0o022  # the command set it, for whatever it creates without a mode of its own


@pytest.mark.root
def test_the_same_spec_owned_by_a_user_is_replaced_not_unchanged(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    generate(capsys, node, "-o", str(output))
    os.chown(output, 12345, 12345)  # the same bytes, 0644: its owner could still edit the hooks
    code, _, err = generate(capsys, node, "-o", str(output))
    assert code == 0 and f"wrote {output}: replaced the same spec owned by uid 12345 (" in err
    assert "unchanged" not in err
    assert output.stat().st_uid == 0


@pytest.mark.root
def test_an_output_through_a_users_directory_or_link_is_refused(
    capsys: pytest.CaptureFixture[str], make_node: NodeFactory, tmp_path: Path
) -> None:
    """``--output /tmp/pub/specs/nvidia.yaml`` with ``/tmp/pub`` a user's and
    ``specs`` their link to wherever: root must write neither where it points nor into the user's
    directory (``wrote ...``, exit 0), where they could swap the file at will."""
    node = make_node("single")
    os.chmod(tmp_path, 0o755)
    pub, somewhere = tmp_path / "pub", tmp_path / "somewhere"
    pub.mkdir()
    somewhere.mkdir()
    os.chown(pub, 12345, 12345)
    os.symlink(somewhere, pub / "specs")
    os.lchown(pub / "specs", 12345, 12345)
    for output in (pub / "specs" / "nvidia.yaml", pub / "nvidia.yaml", pub / "new" / "cdi" / "nvidia.yaml"):
        code, _, err = generate(capsys, node, "--output", str(output))
        assert code == 1
        errors = [line for line in err.splitlines() if line.startswith("cdictk: error:")]
        assert len(errors) == 1 and "owned by uid 12345" in errors[0] and "someone other than root" in err, (
            err
        )
    assert os.listdir(somewhere) == []
    assert sorted(os.listdir(pub)) == ["specs"]


def _generate_as_a_command(node: FakeNode, output: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cdictk", "cdi", "generate", *node.cli_args(), "--output", str(output)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.root
def test_a_users_nvml_put_in_a_listed_directory_after_ldconfig_never_runs(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """ld.so.conf names an application's lib directory, the user's; after ldconfig ran the user puts a
    libnvidia-ml.so.1 there. The loader would never take it (the cache names the driver's file for the
    SONAME), and generate takes the driver's too: the planted constructor never runs as root. Before,
    discovery took the first directory of the cache's that held the name, the user's, and ran it."""
    node = make_node("single")
    marker = str(tmp_path / "ran")
    plant(user_lib_dir(node.root), "libnvidia-ml.so.1", marker)
    result = _generate_as_a_command(node, tmp_path / "nvidia.yaml")
    assert ran(marker) == []
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"wrote {tmp_path}/nvidia.yaml (")
    assert "NVML" not in result.stderr and "falling back" not in result.stderr  # the driver's NVML answered


@pytest.mark.root
def test_a_users_nvml_the_cache_names_is_refused_and_generate_goes_on_without_nvml(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    """ldconfig ran again since, and lists the user's directory first: the cache names the user's file,
    which the loader would take. It is not root's: one warning, and the GPUs from procfs, as without
    NVML."""
    node = make_node("single")
    marker = str(tmp_path / "ran")
    planted = plant(user_lib_dir(node.root, first=True), "libnvidia-ml.so.1", marker)
    relist(node.root)
    result = _generate_as_a_command(node, tmp_path / "nvidia.yaml")
    assert ran(marker) == []
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"cdictk: warning: libnvidia-ml.so.1: NVML: {os.path.dirname(planted)}: owned by uid {USER}, not "
        "root: not loaded (cdictk would run its code as root); falling back to /proc/driver/nvidia/gpus "
        "(full GPUs only, no MIG)"
    )
