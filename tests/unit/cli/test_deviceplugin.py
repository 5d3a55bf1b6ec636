"""``cdictk device-plugin`` as a process: one-line errors for bad settings, then a run on the fake
eight-GPU node against the kubelet stand-in that registers, follows a MIG change without gRPC's fork
warnings, and ends with status 0 on SIGTERM."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdictk.cdi.load import load_spec
from cdictk.cli.deviceplugin import device_plugin_command
from cdictk.cli.main import main
from cdictk.deviceplugin import plugin as plugin_module
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.startpath.helpers.errors import CdictkError
from tests.conftest import NodeFactory
from tests.e2e.kubelet.kubelet import Kubelet
from tests.fakenode.nvml import FakeMig
from tests.unit.deviceplugin.conftest import generate_spec

CDICTK = [sys.executable, "-m", "cdictk", "device-plugin"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--device-list-strategy", "envvar"], "envvar is refused"),
        (["--device-list-strategy", "cdi-cri,nope"], "--device-list-strategy: unknown strategy 'nope'"),
        (["--xid-recovery", "soon"], "--xid-recovery: must be a number of seconds or never, not 'soon'"),
        (["--rescan-interval", "0"], "--rescan-interval: must be above 0"),
        (["--config", "/nonexistent/config.yaml"], "/nonexistent/config.yaml"),
        (["--cdi-kind", "bogus"], '--cdi-kind: invalid kind "bogus": want vendor/class'),
        (["--spec-dir", "/etc/cdi", "--spec-dir", "cdi"], "--spec-dir: must be an absolute path, not 'cdi'"),
        (["--plugin-dir", "plugins"], "--plugin-dir: must be an absolute path, not 'plugins'"),
        (["--driver-root", "run/nvidia/driver"], "--driver-root: must be an absolute path"),
    ],
)
def test_bad_settings_are_one_line_and_status_1(args: list[str], said: str) -> None:
    result = subprocess.run([*CDICTK, *args], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_settings_file_nested_20000_deep_is_one_line_and_status_1(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("flags: " + "{plugin: " * 20000 + "x" + "}" * 20000 + "\n")
    result = subprocess.run(
        [*CDICTK, "--config", str(deep)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"cdictk: error: {deep}: ") and "nest" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_without_the_kubernetes_extra_it_says_what_to_install() -> None:
    # grpc made unimportable, as on a node without `cdictk[kubernetes]`
    code = (
        "import sys; sys.modules['grpc'] = None\n"
        "from cdictk.cli.main import main\n"
        "sys.exit(main(['device-plugin']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip().endswith("grpc is missing: pip install 'cdictk[kubernetes]'"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"DEVICE_LIST_STRATEGY": "envvar"}, "--device-list-strategy (from DEVICE_LIST_STRATEGY): "),
        ({"DEVICE_ID_STRATEGY": "index"}, "--device-id-strategy (from DEVICE_ID_STRATEGY): only uuid"),
        ({"PASS_DEVICE_SPECS": "true"}, "--pass-device-specs (from PASS_DEVICE_SPECS): not supported"),
        ({"CDI_ANNOTATION_PREFIX": "cdi"}, "--cdi-annotation-prefix (from CDI_ANNOTATION_PREFIX): must be"),
        (
            {"NVIDIA_DRIVER_ROOT": "run/nvidia"},
            "--driver-root (from NVIDIA_DRIVER_ROOT): must be an absolute",
        ),
        ({"NVIDIA_DEV_ROOT": "dev"}, "--dev-root (from NVIDIA_DEV_ROOT): must be an absolute path"),
        ({"CONFIG_FILE": "/nonexistent/config.yaml"}, "/nonexistent/config.yaml: No such file"),
    ],
)
def test_nvidias_variables_are_read_and_a_bad_one_is_named(env: dict[str, str], said: str) -> None:
    """A DaemonSet written for NVIDIA's plugin sets these; the error names the variable to fix."""
    result = subprocess.run(
        CDICTK, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **env}
    )
    assert result.returncode == 1, result
    assert said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """The settings each run of the command would start the plugin with; the plugin never starts."""
    started: list[Settings] = []

    class Recorded:
        def __init__(self, settings: Settings, log: object) -> None:
            started.append(settings)

        def run(self, stop: object) -> None:
            pass

    monkeypatch.setattr(plugin_module, "DevicePlugin", Recorded)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # pytest's own handlers stay
    return started


def test_nvidias_variables_set_what_their_flags_set(ran: list[Settings]) -> None:
    env = {
        "MIG_STRATEGY": "mixed",
        "DEVICE_LIST_STRATEGY": "cdi-cri,volume-mounts",
        "DEVICE_ID_STRATEGY": "uuid",
        "PASS_DEVICE_SPECS": "false",
        "CDI_ANNOTATION_PREFIX": "example.com/",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "NVIDIA_DEV_ROOT": "/",
    }
    result = CliRunner().invoke(device_plugin_command, [], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert ran[0].mig_strategy == "mixed"
    assert ran[0].list_strategies == ("cdi-cri", "volume-mounts")
    assert ran[0].cdi_annotation_prefix == "example.com/"
    assert (ran[0].driver_root, ran[0].dev_root) == ("/run/nvidia/driver", "/")
    # Where NVIDIA's plugin sees the driver in its container comes first: that is where we look.
    result = CliRunner().invoke(
        device_plugin_command, [], env={**env, "DRIVER_ROOT_CTR_PATH": "/driver-root"}, catch_exceptions=False
    )
    assert ran[1].driver_root == "/driver-root"
    # A flag wins over its variable.
    result = CliRunner().invoke(device_plugin_command, ["--mig-strategy", "single"], env=env)
    assert ran[2].mig_strategy == "single"


@pytest.mark.root
@pytest.mark.parametrize(
    "kind",
    [
        "nvidia.com/gpu",
        "k8s.gpu.example.com/mig-1g.10gb",
        "vendor.com/class_1",
        "my_vendor.com/gpu",  # the reference library takes it, the CDI specification does not
        "v" * 250 + ".com/gpu",
        "vendor.com/" + "c" * 64,
        "1vendor.com/gpu",
        "vendor.com/gpu-",
    ],
)
def test_the_device_plugin_serves_the_kinds_cdi_generate_writes(
    kind: str,
    make_node: NodeFactory,
    tmp_path: Path,
    ran: list[Settings],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One kind check for both: the plugin's kind is the node spec's, which cdi generate writes."""
    plugin = CliRunner().invoke(device_plugin_command, ["--cdi-kind", kind], env={})
    node = make_node("single")
    vendor, _, cls = kind.partition("/")
    output = tmp_path / "spec.yaml"
    code = main(["cdi", "generate", *node.cli_args(), "--vendor", vendor, "--class", cls, "-o", str(output)])
    generated = capsys.readouterr().err
    if code == 0:
        assert plugin.exit_code == 0 and ran[0].cdi_kind == kind, plugin.output
        assert load_spec(str(output)).kind == kind
    else:
        assert plugin.exit_code == 1 and not ran
        assert isinstance(plugin.exception, CdictkError)
        # The same reason after each command's own flag.
        assert generated.count("\n") == 1 and generated.endswith(f": {plugin.exception.problem.reason}\n")


def test_help_explains_the_strategies() -> None:
    result = subprocess.run([*CDICTK, "--help"], capture_output=True, text=True, timeout=60, check=True)
    text = "".join(result.stdout.split())  # click wraps lines, at hyphens too
    for words in ("--mig-strategy", "cdi-cri", "cdi-annotations", "volume-mounts", "envvar is refused"):
        assert words.replace(" ", "") in text


@pytest.mark.root
def test_a_plugin_dir_too_long_for_its_sockets_is_one_line_and_status_1(make_node: NodeFactory) -> None:
    """Found at start, as every other bad setting, rather than by each registration failing."""
    node = make_node("eight")
    plugin_dir = "/tmp/" + "d" * 90
    args = ["--plugin-dir", plugin_dir, *node.cli_args(), "--no-spec-check"]
    result = subprocess.run([*CDICTK, *args], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result
    *notes, line = result.stderr.strip().splitlines()
    assert all("is in MIG mode and left out" in note for note in notes), result.stderr  # GPU 0's
    assert line.endswith(
        f"{plugin_dir}/cdictk-nvidia.com_gpu.sock: longer than a Unix socket path may be (107 bytes): "
        "a shorter resource name (sharing.timeSlicing.resources[].rename) or plugin directory"
    ), line
    assert not os.path.exists(plugin_dir)


@pytest.fixture
def plugin_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="cdictk-dpcli-", dir="/tmp")  # socket paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.root
def test_serves_follows_a_mig_change_quietly_and_stops_on_sigterm(
    make_node: NodeFactory, tmp_path: Path, plugin_dir: str
) -> None:
    node = make_node("eight")
    generate_spec(node, tmp_path / "cdi")
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    args = [
        "--plugin-dir", plugin_dir, "--driver-root", node.root, "--proc-root", node.proc,
        "--sys-root", node.sys, "--spec-dir", str(tmp_path / "cdi"), "--mig-strategy", "mixed",
        "--rescan-interval", "0.2",
    ]  # fmt: skip
    small = "nvidia.com/mig-1g.10gb"
    process = subprocess.Popen([*CDICTK, *args], stderr=subprocess.PIPE, text=True)
    try:
        kubelet.wait_for("the plugin", lambda k: len(k.devices(small)) == 2)
        new = dataclasses.replace(
            node.preset.migs[1], index=3, gi=9, uuid="MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000009"
        )
        migs: tuple[FakeMig, ...] = (*node.preset.migs[1:], new)
        node.reconfigure_mig(migs)  # discovery runs again, forking NVML's child beside gRPC's threads
        kubelet.wait_for("the new MIG device", lambda k: len(k.devices(small)) == 3)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        kubelet.stop()
    assert process.returncode == 0, stderr
    assert "discovering it again" in stderr
    assert "fork" not in stderr, stderr
    assert all(line.startswith("cdictk device-plugin: ") for line in stderr.splitlines()), stderr
