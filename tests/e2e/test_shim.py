"""`cdictk-runtime` in front of runc and crun: GPU requests in config.json become CDI devices.

The fake GPU host's spec (nvidia.com/gpu=0, =1 and all) sits in a private spec directory; a private
config file (CDICTK_CONFIG) names it and the low-level runtime under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from cdictk.cdi.dump import dump_yaml
from cdictk.cdi.model import ContainerEdits, Device
from cdictk.runtime.launchers import install_launchers
from cdictk.startpath.shim import settings
from tests.conftest import NodeFactory
from tests.e2e.conftest import ENXIO, FakeGpuHost, Runtime, e2e_spec
from tests.e2e.test_runtimes import cdictk, make_bundle
from tests.fakenode.node import LIB_DIR
from tests.unit.startpath.shim.test_runtimelog import last_runtime_error

pytestmark = pytest.mark.root

INSIDE = "cat /dev/nvidia0; cat /dev/nvidia1; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES; echo end"


@pytest.fixture
def spec_dir(tmp_path: Path, fake_gpu_host: FakeGpuHost) -> Path:
    """The e2e spec plus the merged "all" device a generated spec has, which NVIDIA_VISIBLE_DEVICES=all names."""
    spec = e2e_spec(fake_gpu_host, "nvidia.com/gpu")
    nodes = [node for device in spec.devices for node in device.container_edits.device_nodes]
    spec.devices.append(Device(name="all", container_edits=ContainerEdits(device_nodes=nodes)))
    directory = tmp_path / "cdi"
    directory.mkdir()
    (directory / "e2e.yaml").write_text(dump_yaml(spec))
    return directory


# Most tests here ask through NVIDIA_VISIBLE_DEVICES, which the default settings refuse.
ACCEPT_ENV = "[requests]\naccept-env-unprivileged = true\n"


def shim_command(
    runtime: Runtime, spec_dir: Path, extra: str = ACCEPT_ENV
) -> tuple[list[str], dict[str, str]]:
    """The shim through the launcher an engine runs (``#!python -IS``), with its global options, and
    an environment naming a private settings file (the runtime under test, ``spec_dir``, ``extra``).
    Its parse cache is the test's own: the first call of a test fills it, later ones use it."""
    launcher = spec_dir.parent / "launchers" / "cdictk-runtime"
    if not launcher.exists():
        install_launchers(str(launcher.parent))
    config = spec_dir.parent / "cdictk-config.toml"
    config.write_text(
        f"[runtime]\nruntimes = [{json.dumps(runtime.binary)}]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n"
        + extra
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CDICTK_CONFIG": str(config),
        "CDICTK_CACHE_DIR": os.environ["CDICTK_CACHE_DIR"],
    }
    return [str(launcher), "--root", str(runtime.state_dir)], env


def shim(
    runtime: Runtime, spec_dir: Path, *args: str, extra: str = ACCEPT_ENV
) -> subprocess.CompletedProcess[str]:
    """Runs the shim (see :func:`shim_command`) and captures its output."""
    command, env = shim_command(runtime, spec_dir, extra)
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def gpu_bundle(
    tmp_path: Path, rootfs: Path, *, env: tuple[str, ...] = (), annotations: dict[str, str] | None = None
) -> Path:
    bundle = make_bundle(tmp_path / "bundle", rootfs, INSIDE)
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["env"] += list(env)
    if annotations is not None:
        config["annotations"] = annotations
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def run(
    runtime: Runtime, spec_dir: Path, bundle: Path, extra: str = ACCEPT_ENV
) -> subprocess.CompletedProcess[str]:
    name = f"cdictk-shim-{uuid.uuid4().hex[:12]}"
    return shim(runtime, spec_dir, "run", "--bundle", str(bundle), name, extra=extra)


def test_visible_devices_index(runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path) -> None:
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=0",))
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 0, result.stderr
    assert f"can't open '/dev/nvidia0': {ENXIO}" in result.stdout
    assert "can't open '/dev/nvidia1': No such file or directory" in result.stdout
    assert "VISIBLE=void" in result.stdout  # the spec's env, as a CDI-injected container has it


def test_visible_devices_all_and_annotations(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=all",))
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 0, result.stderr
    assert f"can't open '/dev/nvidia0': {ENXIO}" in result.stdout
    assert f"can't open '/dev/nvidia1': {ENXIO}" in result.stdout
    (tmp_path / "bundle").rename(tmp_path / "first")
    bundle = gpu_bundle(tmp_path, rootfs, annotations={"cdi.k8s.io/gpus": "nvidia.com/gpu=1"})
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 0, result.stderr
    assert "can't open '/dev/nvidia0': No such file or directory" in result.stdout
    assert f"can't open '/dev/nvidia1': {ENXIO}" in result.stdout


def test_an_image_alone_gets_no_gpu_by_default(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all: a pod that asked for no GPU must not get them all."""
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=all",))
    result = run(runtime, spec_dir, bundle, extra="")
    assert result.returncode == 0, result.stderr
    assert "can't open '/dev/nvidia0': No such file or directory" in result.stdout
    assert "can't open '/dev/nvidia1': No such file or directory" in result.stdout
    assert result.stderr.startswith('cdictk-runtime: warning: NVIDIA_VISIBLE_DEVICES="all" ignored: ')
    (tmp_path / "bundle").rename(tmp_path / "first")
    annotated = {"cdi.k8s.io/gpus": "nvidia.com/gpu=1"}  # what a device plugin or the engine asks
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=all",), annotations=annotated)
    result = run(runtime, spec_dir, bundle, extra="")
    assert result.returncode == 0, result.stderr
    assert f"can't open '/dev/nvidia1': {ENXIO}" in result.stdout
    assert "can't open '/dev/nvidia0': No such file or directory" in result.stdout


def test_a_spec_of_another_user_never_reaches_the_config(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    """A planted spec's createRuntime hook must never run as root through cdictk-runtime."""
    marker = tmp_path / "hook-ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    planted = spec_dir / "planted.yaml"
    planted.write_text(
        "cdiVersion: 0.5.0\nkind: example.com/x\ndevices:\n- name: a\n  containerEdits:\n"
        f"    hooks: [{{hookName: createRuntime, path: {evil}}}]\n"
    )
    os.chown(planted, 12345, 12345)
    bundle = gpu_bundle(tmp_path, rootfs, annotations={"cdi.k8s.io/x": "example.com/x=a"})
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 1 and not marker.exists()
    assert f"{planted}: not trusted, skipped: {planted}: owned by uid 12345, not root" in result.stderr
    assert "example.com/x=a: unresolvable CDI device" in result.stderr
    (tmp_path / "bundle").rename(tmp_path / "first")
    bundle = gpu_bundle(tmp_path, rootfs, annotations={"cdi.k8s.io/x": "example.com/x=a"})
    result = run(runtime, spec_dir, bundle, extra="accept-untrusted-specs = true\n")  # in [runtime]
    assert result.returncode == 0, result.stderr
    assert marker.exists()  # the control: the same spec, trusted by the setting, does run its hook


def test_void_leaves_the_config_byte_for_byte(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=void",))
    before = (bundle / "config.json").read_bytes()
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 0, result.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert "can't open '/dev/nvidia0': No such file or directory" in result.stdout


def test_an_unknown_device_stops_the_start_with_one_line(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    for value in ("7", "GPU-x y"):
        bundle = gpu_bundle(tmp_path, rootfs, env=(f"NVIDIA_VISIBLE_DEVICES={value}",))
        before = (bundle / "config.json").read_bytes()
        result = run(runtime, spec_dir, bundle)
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("cdictk-runtime: error: ")
        assert "end" not in result.stdout  # the container never ran
        assert (bundle / "config.json").read_bytes() == before
        (tmp_path / "bundle").rename(tmp_path / f"done-{value.replace(' ', '_')}")


def test_the_runtime_log_gets_the_refusal_and_the_warning(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    """Run as containerd runs it (``--log FILE --log-format json``): a refusal is the log's last error,
    which the engine reports, and a warning goes to the log, not to the container's stderr."""
    log = tmp_path / "log.json"
    options = ("--log", str(log), "--log-format", "json")
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=7",))
    refused = shim(
        runtime, spec_dir, *options, "run", "--bundle", str(bundle), f"cdictk-{uuid.uuid4().hex[:12]}"
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("cdictk-runtime: error: nvidia.com/gpu=7: unresolvable CDI device")
    assert last_runtime_error(log) == refused.stderr.strip()
    (tmp_path / "bundle").rename(tmp_path / "refused")
    log.unlink()
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=all",))
    name = f"cdictk-{uuid.uuid4().hex[:12]}"
    started = shim(runtime, spec_dir, *options, "run", "--bundle", str(bundle), name, extra="")
    assert started.returncode == 0, started.stderr
    assert "end" in started.stdout and "cdictk-runtime" not in started.stdout + started.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["level"] for r in records] == ["warning"], records
    assert records[0]["msg"].startswith('cdictk-runtime: warning: NVIDIA_VISIBLE_DEVICES="all" ignored: ')


def test_other_commands_pass_through(runtime: Runtime, spec_dir: Path) -> None:
    direct = subprocess.run(
        [runtime.binary, "--root", str(runtime.state_dir), "state", "no-such-container"],
        capture_output=True,
        text=True,
        check=False,
    )
    through = shim(runtime, spec_dir, "state", "no-such-container")
    assert (through.returncode, through.stdout) == (direct.returncode, direct.stdout)
    assert through.returncode != 0


def test_driver_capabilities_pick_the_driver_files(
    runtime: Runtime, rootfs: Path, make_node: NodeFactory, tmp_path: Path
) -> None:
    """A spec generated for the fake node mounts every driver file; the container gets what it asks for."""
    node = make_node("single")
    spec_dir = tmp_path / "generated"
    spec_dir.mkdir()
    generated = cdictk(
        "cdi",
        "generate",
        *node.cli_args(),
        "--disable-hook",
        "all",
        "--output",
        str(spec_dir / "nvidia.yaml"),
    )
    assert generated.returncode == 0, generated.stderr
    script = f"grep -c . /proc/self/mountinfo; grep -o ' {LIB_DIR}/[^ ]*' /proc/self/mountinfo; grep -o ' /usr/bin/nvidia-smi ' /proc/self/mountinfo"
    for capabilities, present, absent in (
        (None, ["libcuda.so.", "libnvidia-ml.so.", "nvidia-smi"], ["libGLX_nvidia", "libvdpau_nvidia"]),
        ("utility", ["libnvidia-ml.so.", "nvidia-smi"], ["libcuda.so.", "libGLX_nvidia"]),
        ("all", ["libcuda.so.", "libGLX_nvidia", "libvdpau_nvidia", "nvidia-smi"], []),
    ):
        env = (
            "NVIDIA_VISIBLE_DEVICES=0",
            *(() if capabilities is None else (f"NVIDIA_DRIVER_CAPABILITIES={capabilities}",)),
        )
        bundle = make_bundle(tmp_path / f"bundle-{capabilities}", rootfs, script)
        config = json.loads((bundle / "config.json").read_text())
        config["process"]["env"] += list(env)
        (bundle / "config.json").write_text(json.dumps(config))
        result = shim(
            runtime, spec_dir, "run", "--bundle", str(bundle), f"cdictk-caps-{uuid.uuid4().hex[:12]}"
        )
        assert result.returncode == 0, result.stderr
        for name in present:
            assert name in result.stdout, (capabilities, name, result.stdout)
        for name in absent:
            assert name not in result.stdout, (capabilities, name, result.stdout)


def test_a_node_without_a_spec_gets_one_made_in_memory(
    runtime: Runtime, rootfs: Path, make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    empty = tmp_path / "no-specs"
    empty.mkdir()
    node_settings = ACCEPT_ENV + (
        f"[node]\ndriver-root = {json.dumps(node.root)}\ndev-root = {json.dumps(node.root)}\n"
        f"proc-root = {json.dumps(node.proc)}\nsys-root = {json.dumps(node.sys)}\n"
    )
    bundle = make_bundle(
        tmp_path / "bundle", rootfs, "cat /dev/nvidia0; ls /dev/nvidia1; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES"
    )
    oci = json.loads((bundle / "config.json").read_text())
    oci["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
    oci["root"]["readonly"] = False  # the in-memory spec's hook writes links (crun: read-only before hooks)
    (bundle / "config.json").write_text(json.dumps(oci))
    name = f"cdictk-jit-{uuid.uuid4().hex[:12]}"
    result = shim(runtime, empty, "run", "--bundle", str(bundle), name, extra=node_settings)
    assert result.returncode == 0, result.stderr
    assert f"can't open '/dev/nvidia0': {ENXIO}" in result.stdout
    assert "ls: /dev/nvidia1: No such file or directory" in result.stdout
    assert "VISIBLE=void" in result.stdout
    (bundle / "config.json").write_text(json.dumps(oci))  # as it was before the shim injected the GPU
    off = node_settings + "generate-when-missing = false\n"
    result = shim(runtime, empty, "run", "--bundle", str(bundle), name + "-off", extra=off)
    assert result.returncode == 1 and "unresolvable CDI device" in result.stderr


def test_a_changed_spec_is_seen_at_the_next_start(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    """The second start uses the parse cache; an edited spec (device 0 gone) is read again at once."""
    for attempt in ("cold", "warm"):
        bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=0",))
        result = run(runtime, spec_dir, bundle)
        assert result.returncode == 0, (attempt, result.stderr)
        assert f"can't open '/dev/nvidia0': {ENXIO}" in result.stdout
        (tmp_path / "bundle").rename(tmp_path / f"done-{attempt}")
    assert os.listdir(os.environ["CDICTK_CACHE_DIR"])  # the cache was used
    spec = spec_dir / "e2e.yaml"
    spec.write_text(spec.read_text().replace('name: "0"', 'name: "9"', 1))
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=0",))
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 1 and "unresolvable CDI device" in result.stderr, result.stderr


def test_none_gives_the_driver_without_a_gpu(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    script = "exec 2>&1; cat /dev/nvidiactl; cat /dev/nvidia0; cat /mounted/file; echo end"
    bundle = make_bundle(tmp_path / "bundle", rootfs, script)
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=none")
    (bundle / "config.json").write_text(json.dumps(config))
    result = run(runtime, spec_dir, bundle)
    assert result.returncode == 0, result.stderr
    assert f"can't open '/dev/nvidiactl': {ENXIO}" in result.stdout  # the spec's common node, allowed
    assert "can't open '/dev/nvidia0': No such file or directory" in result.stdout
    assert "hello from the host" in result.stdout  # the spec's common mount (a file of no capability)


def test_create_start_state_delete_as_an_engine_drives_it(
    runtime: Runtime, rootfs: Path, spec_dir: Path, tmp_path: Path
) -> None:
    """containerd and Docker call create, then start, state and delete; only create changes anything."""
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=0",))
    name = f"cdictk-shim-{uuid.uuid4().hex[:12]}"
    log = tmp_path / "container.log"
    command, env = shim_command(runtime, spec_dir)
    with open(log, "wb") as output:  # a file, not a pipe: the container keeps create's stdio open
        created = subprocess.run(
            [*command, "create", "--bundle", str(bundle), name],
            stdout=output,
            stderr=output,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=120,
            check=False,
        )
    try:
        assert created.returncode == 0, log.read_text()
        direct = subprocess.run(
            [runtime.binary, "--root", str(runtime.state_dir), "state", name],
            capture_output=True,
            text=True,
            check=True,
        )
        through = shim(runtime, spec_dir, "state", name)
        assert (through.returncode, through.stdout) == (0, direct.stdout)
        assert json.loads(through.stdout)["status"] == "created"
        assert shim(runtime, spec_dir, "start", name).returncode == 0
        for _ in range(200):
            state = json.loads(shim(runtime, spec_dir, "state", name).stdout)
            if state["status"] == "stopped":
                break
            time.sleep(0.05)
        assert state["status"] == "stopped"
        assert f"can't open '/dev/nvidia0': {ENXIO}" in log.read_text()
    finally:
        deleted = shim(runtime, spec_dir, "delete", "--force", name)
    assert deleted.returncode == 0, deleted.stderr


def test_a_container_that_asks_for_nothing_is_created_without_python(
    runtime: Runtime, rootfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell front finds no request in config.json and execs the runtime itself, for run
    and for an engine's create, start, state and delete; a request still goes to Python. The front is
    written from a settings file of the test's (no CDICTK_CONFIG, which would send everything to
    Python), and its Python launcher is replaced by one that only fails: whatever starts, starts
    without it."""
    config = tmp_path / "config.toml"
    config.write_text(f"[runtime]\nruntimes = [{json.dumps(runtime.binary)}]\n")
    monkeypatch.setattr(settings, "CONFIG_PATH", str(config))
    front = install_launchers(str(tmp_path / "launchers"))[-1]
    (tmp_path / "launchers" / "cdictk-runtime.py").write_text("#!/bin/sh\necho Python started >&2\nexit 99\n")
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    command = [front, "--root", str(runtime.state_dir)]
    # Not INSIDE, whose echo of NVIDIA_VISIBLE_DEVICES would send it to Python (a harmless false hit).
    bundle = make_bundle(tmp_path / "bundle", rootfs, "cat /dev/nvidia0; echo end")
    before = (bundle / "config.json").read_bytes()

    def shim_run(*args: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
        with open(log or os.devnull, "w") as output:  # a file: a created container keeps its stdio open
            return subprocess.run(
                [*command, *args],
                stdin=subprocess.DEVNULL,
                stdout=output if log else subprocess.PIPE,
                stderr=output if log else subprocess.PIPE,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )

    result = shim_run("run", "--bundle", str(bundle), f"cdictk-shim-{uuid.uuid4().hex[:12]}")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert "can't open '/dev/nvidia0': No such file or directory" in result.stdout
    assert result.stdout.rstrip().endswith("end")
    name = f"cdictk-shim-{uuid.uuid4().hex[:12]}"
    log = tmp_path / "container.log"
    created = shim_run("create", "-b", str(bundle), name, log=log)
    try:
        assert created.returncode == 0, log.read_text()
        assert json.loads(shim_run("state", name).stdout)["status"] == "created"
        assert shim_run("start", name).returncode == 0
        for _ in range(200):
            state = json.loads(shim_run("state", name).stdout)
            if state["status"] == "stopped":
                break
            time.sleep(0.05)
        assert state["status"] == "stopped"
        assert log.read_text().rstrip().endswith("end")
    finally:
        deleted = shim_run("delete", "--force", name)
    assert deleted.returncode == 0, deleted.stderr
    assert (bundle / "config.json").read_bytes() == before
    (tmp_path / "bundle").rename(tmp_path / "first")
    bundle = gpu_bundle(tmp_path, rootfs, env=("NVIDIA_VISIBLE_DEVICES=0",))
    result = shim_run("run", "--bundle", str(bundle), f"cdictk-shim-{uuid.uuid4().hex[:12]}")
    assert (result.returncode, result.stderr) == (99, "Python started\n")  # the control
