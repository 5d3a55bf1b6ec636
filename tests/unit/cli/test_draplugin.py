"""``cdictk dra-plugin`` as a process: its help, one-line errors for bad settings and a missing extra, the
health flags as the plugin gets them, then
a run on the fake eight-GPU node against the API server stand-in that registers with a fake kubelet,
publishes, and ends with status 0 on SIGTERM, its sockets removed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from cdictk.cli.main import cli, main
from cdictk.dra import kubeletplugin
from cdictk.dra.kubeletapi.pluginregistration_pb2 import InfoRequest, RegistrationStatus
from cdictk.dra.kubeletapi.pluginregistration_pb2_grpc import RegistrationStub
from cdictk.dra.kubeletplugin import PluginSettings
from cdictk.node.gpuhealth import IGNORED_XIDS, HealthPolicy
from tests.conftest import NodeFactory
from tests.e2e.kubelet.apiserver import running

CDICTK = [sys.executable, "-m", "cdictk", "dra-plugin"]
DRIVER = "gpu.nvidia.com"


def without_node_name() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in ("NODE_NAME", "KUBECONFIG")}


def test_help_explains_what_it_does_beside_the_device_plugin_and_its_flags() -> None:
    result = CliRunner().invoke(cli, ["dra-plugin", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for words in (
        "Dynamic Resource Allocation",
        "ResourceSlices",
        "NodePrepareResources",
        "cdictk device-plugin",
        "never two of them",
        "SIGTERM",
        "--driver-name NAME",
        "[default: gpu.nvidia.com]",
        "[env var: NODE_NAME]",
        "[env var: KUBECONFIG]",
        "in-cluster",
        "[default: /var/lib/kubelet/plugins_registry]",
        "/var/lib/kubelet/plugins/<driver>",
        "[default: /var/run/cdi]",
        "--driver-root",
        "--dev-root",
        "--proc-root",
        "--sys-root",
        "--resync SECONDS",
        "[default: 30.0]",
        "--health-checks / --no-health-checks",
        "gpu.nvidia.com/xid=<Xid>",
        "gpu.nvidia.com/gpu-lost (NoSchedule)",
        "DRADeviceTaints",
        "--ignore-xids LIST",
        "13, 31, 43, 45, 68, 109",
    ):
        assert words in text, words


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "cdictk: error: --node-name: required (or NODE_NAME): the node this plugin runs on"),
        (["--node-name", "node1", "--plugin-dir", "plugins"], "--plugin-dir: must be an absolute path"),
        (["--node-name", "node1", "--cdi-dir", "cdi"], "--cdi-dir: must be an absolute path, not 'cdi'"),
        (["--node-name", "node1", "--kubeconfig", "kc"], "--kubeconfig: must be an absolute path"),
        (["--node-name", "node1", "--sys-root", "sys"], "--sys-root: must be an absolute path, not 'sys'"),
        (["--node-name", "node1", "--hook-path", "hook"], "--hook-path: must be an absolute path"),
        (["--node-name", "node1", "--resync", "0"], "--resync: must be above 0 seconds"),
        (["--node-name", "node1", "--driver-name", "GPU"], "driver name: 'GPU' is not a DNS subdomain"),
        (["--node-name", "Node_1"], "node name: 'Node_1' is not a Kubernetes node name"),
        (["--node-name", "node1", "--ignore-xids", "48,x"], "--ignore-xids: 'x' is no Xid number"),
    ],
)
def test_bad_settings_are_one_line_and_status_1(
    args: list[str], said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["dra-plugin", *args]) == 1
    err = capsys.readouterr().err
    assert said in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("args", "enabled", "ignored"),
    [
        ([], True, IGNORED_XIDS),
        (["--no-health-checks"], False, IGNORED_XIDS),
        (["--ignore-xids", "48, 63,"], True, (*IGNORED_XIDS, 48, 63)),
    ],
)
def test_the_health_flags_reach_the_plugin(
    monkeypatch: pytest.MonkeyPatch, args: list[str], enabled: bool, ignored: tuple[int, ...]
) -> None:
    given: list[PluginSettings] = []

    class Plugin:
        def __init__(self, settings: PluginSettings, log: object) -> None:
            given.append(settings)

        def run(self, stop: object) -> None:
            pass

    monkeypatch.setattr(kubeletplugin, "DraPlugin", Plugin)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # pytest's own SIGTERM stays its own
    assert main(["dra-plugin", "--node-name", "node1", *args]) == 0
    [settings] = given
    assert settings.health == HealthPolicy(enabled=enabled, ignored_xids=ignored)


def test_a_flag_click_cannot_read_is_a_usage_error() -> None:
    assert main(["dra-plugin", "--resync", "soon"]) == 2


def test_without_the_kubernetes_extra_it_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['grpc'] = None\n"
        "from cdictk.cli.main import main\n"
        "sys.exit(main(['dra-plugin', '--node-name', 'node1']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip().endswith("grpc is missing: pip install 'cdictk[kubernetes]'"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.fixture
def dirs() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cdictk-dracli-", dir="/tmp"))  # socket paths are short
    (path / "registry").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Lines:
    """A process's stderr, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stderr is not None
        stream = process.stderr
        self.thread = threading.Thread(
            target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True
        )
        self.thread.start()

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in {self.lines}")
            time.sleep(0.05)


@pytest.mark.root
def test_it_registers_publishes_and_stops_on_sigterm(make_node: NodeFactory, dirs: Path) -> None:
    node = make_node("eight")
    boot_id = Path(node.proc, "sys/kernel/random/boot_id")
    boot_id.parent.mkdir(parents=True, exist_ok=True)
    boot_id.write_text("5d0c4a8e-2b1f-4c3d-9e8f-7a6b5c4d3e2f\n")
    with running() as server:
        server.add_node("node1")
        kubeconfig = server.write_kubeconfig(dirs / "kubeconfig")
        args = [
            "--registry-dir", str(dirs / "registry"), "--plugin-dir", str(dirs / "plugin"),
            "--cdi-dir", str(dirs / "cdi"), "--kubeconfig", str(kubeconfig), *node.cli_args(),
        ]  # fmt: skip
        env = {**without_node_name(), "NODE_NAME": "node1"}
        process = subprocess.Popen([*CDICTK, *args], stderr=subprocess.PIPE, text=True, env=env)
        lines = Lines(process)
        registration = dirs / "registry" / f"{DRIVER}-reg.sock"
        try:
            lines.wait_for("waiting for the kubelet")
            with grpc.insecure_channel(f"unix://{registration}") as channel:
                stub = RegistrationStub(channel)
                assert stub.GetInfo(InfoRequest(), timeout=5).endpoint == str(dirs / "plugin" / "dra.sock")
                stub.NotifyRegistrationStatus(RegistrationStatus(plugin_registered=True), timeout=5)
            lines.wait_for("registered with the kubelet")
            lines.wait_for(" ResourceSlice(s)")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            lines.thread.join(timeout=10)
        assert process.returncode == 0, lines.lines
        assert not registration.exists() and not (dirs / "plugin" / "dra.sock").exists()
        assert server.slices  # left for the kubelet to wipe
    said = [line.rstrip("\n") for line in lines.lines]
    assert all(line.startswith("cdictk dra-plugin: ") for line in said), said
    assert "cdictk dra-plugin: registered with the kubelet" in said
    devices = len(next(iter(server.slices.values()))["spec"]["devices"])
    assert f"cdictk dra-plugin: published {devices} device(s) in 1 ResourceSlice(s)" in said
    assert "fork" not in " ".join(said)
    assert said[-1] == "cdictk dra-plugin: stopped"
