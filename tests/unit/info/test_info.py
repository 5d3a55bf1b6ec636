"""``cdictk info`` on the fake node: healthy, then broken in the ways that stop GPU containers."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdictk.cli.main import main
from cdictk.configure.engines import ENGINES
from cdictk.info.checks import Status
from cdictk.info.enginestate import check_engines
from tests.conftest import NodeFactory
from tests.fakenode.node import FakeNode, _mig


@pytest.fixture(autouse=True)
def no_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDICTK_CONFIG", str(tmp_path / "no-cdictk-config.toml"))


def generate(node: FakeNode, spec_dir: Path) -> Path:
    output = spec_dir / "nvidia.yaml"
    assert main(["cdi", "generate", *node.cli_args(), "--output", str(output)]) == 0
    return output


def info(node: FakeNode, spec_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["info", "--json", *node.cli_args(), "--spec-dir", str(spec_dir)])
    return code, json.loads(capsys.readouterr().out)


def finding(report: dict[str, Any], check: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["check"] == check or f["check"].startswith(check + " ")]
    assert found, f"no {check} finding in {report['findings']}"
    return found[0]  # type: ignore[no-any-return]


def run_fix(command: str) -> int:
    """Runs a fix ``cdictk info`` printed, as an operator would paste it."""
    words = shlex.split(command)
    assert words[0] == "cdictk"
    return main(words[1:])


@pytest.mark.root
def test_a_healthy_node(make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = make_node("eight")
    generate(node, tmp_path / "cdi")
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 0 and report["ok"] is True
    for check in ("driver", "modules", "device nodes", "gpus", "mig", "spec"):
        assert finding(report, check)["status"] == "ok", finding(report, check)
    assert report["driver_version"] == node.version
    assert len(report["gpus"]) == 8 and len(report["gpus"][0]["mig_devices"]) == 3
    assert report["specs"][0]["status"] == "current"
    assert "/dev/nvidia-uvm" in report["device_nodes"]["expected"] and report["device_nodes"]["missing"] == []
    assert main(["info", *node.cli_args(), "--spec-dir", str(tmp_path / "cdi")]) == 0
    table = capsys.readouterr().out
    assert table.startswith("CHECK") and table.rstrip().endswith("GPU containers should start.")


@pytest.mark.root
def test_a_missing_node_is_a_failure_with_its_fix(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("single")
    generate(node, tmp_path / "cdi")
    Path(node.root, "dev/nvidia-uvm").unlink()
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 1 and report["ok"] is False
    nodes = finding(report, "device nodes")
    assert nodes["status"] == "fail" and "/dev/nvidia-uvm" in nodes["detail"]
    assert report["device_nodes"]["missing"] == ["/dev/nvidia-uvm"]
    # The spec describes the node fully (type, numbers): the runtime makes it, so the spec is fine.
    assert finding(report, "spec")["status"] == "ok"
    assert run_fix(nodes["fix"]) == 0  # the printed command, with the roots info was given
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 0 and finding(report, "device nodes")["status"] == "ok"


@pytest.mark.root
def test_renumbered_nodes_and_removed_mig_devices_make_the_spec_stale(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("eight")
    generate(node, tmp_path / "cdi")
    node.reconfigure_mig(node.preset.migs[:1])  # two instances destroyed
    code, report = info(node, tmp_path / "cdi", capsys)
    spec = finding(report, "spec")
    assert code == 1 and "names devices the node no longer has: MIG-" in spec["detail"]
    assert run_fix(spec["fix"]) == 0
    assert info(node, tmp_path / "cdi", capsys)[0] == 0
    uvm = Path(node.root, "dev/nvidia-uvm")
    uvm.unlink()
    os.mknod(uvm, 0o20666, os.makedev(511, 0))  # the module came back with another major
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 1 and "device numbers changed: " in finding(report, "spec")["detail"]


@pytest.mark.root
def test_another_vendors_spec_is_never_overwritten_and_conflicts_fail(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("single")
    output = generate(node, tmp_path / "cdi")
    nic = tmp_path / "cdi" / "nic.yaml"
    nic.write_text("cdiVersion: 0.5.0\nkind: example.com/nic\ndevices: []\n")
    code, report = info(node, tmp_path / "cdi", capsys)
    other = finding(report, f"spec {nic}")
    assert code == 0 and other["status"] == "warn" and "cdictk cdi generate" not in other["fix"]
    nic.unlink()
    (tmp_path / "cdi" / "copy.yaml").write_bytes(output.read_bytes())
    code, report = info(node, tmp_path / "cdi", capsys)
    conflict = finding(report, "specs")
    assert code == 1 and "more than one file" in conflict["detail"]


@pytest.mark.root
def test_a_mig_change_and_a_driver_upgrade_make_the_spec_stale(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("eight")
    output = generate(node, tmp_path / "cdi")
    node.reconfigure_mig((*node.preset.migs, _mig(3, 13, "1g.10gb", 1, 9856)))
    code, report = info(node, tmp_path / "cdi", capsys)
    spec = finding(report, "spec")
    assert code == 1 and spec["status"] == "fail"
    assert spec["detail"] == "stale: lacks devices the node has: MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000003"
    assert spec["fix"] == f"cdictk cdi generate {' '.join(node.cli_args())} --output {output}"
    assert run_fix(spec["fix"]) == 0
    assert info(node, tmp_path / "cdi", capsys)[0] == 0
    library = next(Path(node.lib_dir).glob(f"libcuda.so.{node.version}"))
    library.unlink()  # the driver upgrade took the old library
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 1 and str(library) in finding(report, "spec")["detail"]


@pytest.mark.root
def test_no_spec_an_invalid_spec_and_no_driver(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("single")
    (tmp_path / "cdi").mkdir()
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 1 and finding(report, "specs")["status"] == "fail"
    assert run_fix(finding(report, "specs")["fix"]) == 0  # writes into the spec dir info looked at
    assert info(node, tmp_path / "cdi", capsys)[0] == 0
    (tmp_path / "cdi" / "nvidia.yaml").unlink()
    (tmp_path / "cdi" / "broken.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 1 and finding(report, "spec")["detail"].startswith("invalid: ")
    modules = Path(node.proc, "modules")
    modules.write_text("".join(line for line in modules.read_text().splitlines(True) if "uvm" not in line))
    code, report = info(node, tmp_path / "cdi", capsys)
    assert (
        finding(report, "modules")["status"] == "fail"
        and "nvidia_uvm" in finding(report, "modules")["detail"]
    )
    Path(node.proc, "driver/nvidia/version").unlink()
    Path(node.lib_dir, "fake-nvml.conf").unlink()
    for gpu in Path(node.proc, "driver/nvidia/gpus").iterdir():
        for child in gpu.iterdir():
            child.unlink()
        gpu.rmdir()
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 1 and finding(report, "driver")["status"] == "fail"
    assert finding(report, "gpus")["status"] == "fail" and report["gpus"] == []


@pytest.mark.root
def test_a_settings_file_the_shim_cannot_read_fails(
    make_node: NodeFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = make_node("single")
    generate(node, tmp_path / "cdi")
    bad = tmp_path / "config.toml"
    bad.write_text("[runtime\n")
    monkeypatch.setenv("CDICTK_CONFIG", str(bad))
    code, report = info(node, tmp_path / "cdi", capsys)
    settings = finding(report, "cdictk settings")
    assert code == 1 and settings["status"] == "fail" and settings["fix"].startswith("fix it")


@pytest.mark.root
def test_a_gpu_nvml_reports_lost_is_named(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("eight")
    generate(node, tmp_path / "cdi")
    config = node.nvml_config()
    config.gpus[3] = replace(config.gpus[3], lost=True)
    node.write_nvml_config(config)
    code, report = info(node, tmp_path / "cdi", capsys)
    fault = finding(report, "gpu faults")
    assert (
        code == 1 and fault["status"] == "fail" and fault["detail"].startswith("GPU 3: GPU is lost: left out")
    )
    assert finding(report, "mig")["status"] == "ok"  # the healthy GPUs' MIG devices are still seen


def test_settings_that_open_a_trust_boundary_are_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    monkeypatch.setenv("CDICTK_CONFIG", str(path))
    path.write_text("[requests]\naccept-env-unprivileged = false\n")
    assert check_engines(str(tmp_path))[0].status is Status.OK
    path.write_text("[requests]\naccept-env-unprivileged = true\n")
    found = check_engines(str(tmp_path))[0]
    assert found.status is Status.WARN and "a pod that asked for none gets every GPU" in found.detail
    assert found.fix == f"set requests.accept-env-unprivileged = false in {path}"
    path.write_text("[runtime]\naccept-untrusted-specs = true\n[requests]\naccept-env-unprivileged = true\n")
    found = check_engines(str(tmp_path))[0]
    assert "their hooks run as root" in found.detail
    assert found.fix.startswith(
        "set requests.accept-env-unprivileged = false and runtime.accept-untrusted-specs"
    )


def test_engines_under_the_host_root(tmp_path: Path) -> None:
    assert [f.check for f in check_engines(str(tmp_path))] == ["cdictk settings"]  # nothing installed
    docker = tmp_path / "etc/docker/daemon.json"
    docker.parent.mkdir(parents=True)
    docker.write_text('{"features": {"cdi": true}}')
    containerd = tmp_path / "etc/containerd/config.toml"
    containerd.parent.mkdir(parents=True)
    containerd.write_text('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    (containerd.parent / "conf.d").mkdir()
    (containerd.parent / "conf.d/99-cdictk.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    )
    found = {f.check: f for f in check_engines(str(tmp_path))}
    assert found["docker"].status is Status.OK and "CDI on" in found["docker"].detail
    assert found["containerd"].status is Status.OK and "CDI on" in found["containerd"].detail
    docker.write_text("{")
    assert {f.check: f for f in check_engines(str(tmp_path))}["docker"].status is Status.WARN
    os.remove(containerd.parent / "conf.d/99-cdictk.toml")
    off = {f.check: f for f in check_engines(str(tmp_path))}["containerd"]
    assert (
        off.status is Status.WARN and off.fix == "cdictk runtime configure --runtime containerd --enable-cdi"
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a = " + "[" * 5000 + "]" * 5000 + "\n", id="nested-too-deeply"),
        pytest.param("a = " + "1" * 5000 + "\n", id="integer-past-the-digit-limit"),
    ],
)
def test_a_config_past_the_parsers_limits_is_a_warning_not_a_traceback(tmp_path: Path, text: str) -> None:
    """tomllib and json raise RecursionError or a plain ValueError here, not their decode errors."""
    for engine in ENGINES.values():
        config = tmp_path / engine.config.lstrip("/")
        config.parent.mkdir(parents=True)
        config.write_text(text.replace("a = ", "") if config.suffix == ".json" else text)
    found = {f.check: f for f in check_engines(str(tmp_path))}
    for engine in ENGINES.values():
        assert found[engine.label].status is Status.WARN, found
        assert f"cannot parse {tmp_path / engine.config.lstrip('/')}: " in found[engine.label].detail


@pytest.mark.root
def test_a_mig_cap_node_not_made_yet_is_no_failure(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The generator describes such a node from procfs and the runtime creates it."""
    node = make_node("eight")
    cap = sorted(Path(node.root, "dev/nvidia-caps").glob("nvidia-cap2*"))[0]
    cap.unlink()
    generate(node, tmp_path / "cdi")
    code, report = info(node, tmp_path / "cdi", capsys)
    assert code == 0, finding(report, "spec")
    assert finding(report, "spec")["detail"].endswith("as cdictk cdi generate writes it now")


def test_a_registered_runtime_whose_program_is_missing_is_a_warning(tmp_path: Path) -> None:
    drop_in = tmp_path / "etc/containerd/conf.d/99-cdictk.toml"
    drop_in.parent.mkdir(parents=True)
    (tmp_path / "etc/containerd/config.toml").write_text("version = 2\n")
    drop_in.write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.cdictk.options]\n'
        'BinaryName = "/opt/cdictk/libexec/cdictk-runtime"\n'
    )
    found = {f.check: f for f in check_engines(str(tmp_path))}
    assert found["cdictk-runtime"].status is Status.WARN
    assert "/opt/cdictk/libexec/cdictk-runtime, which is missing" in found["cdictk-runtime"].detail
    program = tmp_path / "opt/cdictk/libexec/cdictk-runtime"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert "cdictk-runtime" not in {f.check for f in check_engines(str(tmp_path))}
    docker = tmp_path / "etc/docker/daemon.json"
    docker.parent.mkdir(parents=True)
    docker.write_text('{"runtimes": {"cdictk": {"path": "/usr/local/bin/cdictk-runtime"}}}')
    found = {f.check: f for f in check_engines(str(tmp_path))}
    assert "/usr/local/bin/cdictk-runtime, which is missing" in found["cdictk-runtime"].detail
    assert "cdictk-runtime registered" in found["docker"].detail


@pytest.mark.root
def test_a_planted_spec_is_a_failure_with_its_fix(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec of another user is skipped, and info says so and how to repair it."""
    node = make_node("single")
    output = generate(node, tmp_path / "cdi")
    planted = tmp_path / "cdi" / "extra.yaml"
    planted.write_text(
        "cdiVersion: 0.5.0\nkind: example.com/x\ndevices: [{name: a, containerEdits: {env: [A=1]}}]\n"
    )
    os.chown(planted, 12345, 12345)
    planted.chmod(0o666)
    code, report = info(node, tmp_path / "cdi", capsys)
    found = finding(report, f"spec {planted}")
    assert code == 1 and found["status"] == "fail"
    assert found["detail"] == f"not trusted, skipped: {planted}: owned by uid 12345, not root"
    assert found["fix"] == (
        f"chown root: {planted} && chmod go-w {planted}, if you wrote it; else rm {planted}"
    )
    assert finding(report, f"spec {output}")["status"] == "ok"  # the node's own spec is still read
    assert {"path": str(planted), "status": "untrusted"}.items() <= next(
        spec for spec in report["specs"] if spec["path"] == str(planted)
    ).items()
    for command in found["fix"].split(", if")[0].split(" && "):
        words = shlex.split(command)
        os.chown(words[2], 0, 0) if words[0] == "chown" else Path(words[2]).chmod(0o644)
    assert info(node, tmp_path / "cdi", capsys)[0] == 0


@pytest.mark.root
def test_suggested_commands_are_quoted(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spec named 'y;id;.yaml' must not give '... --output /.../y;id;.yaml', which runs id when pasted."""
    node = make_node("single")
    spec_dir = tmp_path / "cdi"
    output = generate(node, spec_dir)
    hostile = spec_dir / "y;id;.yaml"
    output.rename(hostile)
    Path(node.lib_dir, f"libcuda.so.{node.version}").unlink()  # stale now: info suggests regenerating it
    code, report = info(node, spec_dir, capsys)
    fix = finding(report, "spec")["fix"]
    assert code == 1 and shlex.split(fix)[-2:] == ["--output", str(hostile)]
    assert f"'{hostile}'" in fix


@pytest.mark.root
def test_a_users_mps_directory_is_reported_and_a_spec_mounting_it_fails(
    make_node: NodeFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user made /tmp/nvidia-mps. generate leaves it out, and info says so with the fix; a
    spec written before (or by another producer) that mounts it is a failure, whatever its kind."""
    node = make_node("eight")
    os.chmod(node.root + "/tmp", 0o1777)
    old = generate(node, tmp_path / "old")  # while the directory was root's: it mounts it
    mps = node.root + "/tmp/nvidia-mps"
    os.chown(mps, 12345, 12345)
    generate(node, tmp_path / "cdi")
    code, report = info(node, tmp_path / "cdi", capsys)
    found = finding(report, "host paths")
    assert found["status"] == "warn" and code == 0
    assert found["detail"] == (
        f"{mps}: owned by uid 12345, not root or a system account (below 1000); left out of the spec"
    )
    assert found["fix"] == f"chown root: {mps}, if it is the node's; else rm -r {mps}"
    code, report = info(node, tmp_path / "old", capsys)
    spec = finding(report, f"spec {old}")
    assert code == 1 and spec["status"] == "fail"
    assert spec["detail"].startswith(f"mounts host paths someone other than root could change: {mps}: ")
    assert next(s for s in report["specs"] if s["path"] == str(old))["status"] == "unsafe"
    assert main(["cdi", "validate", str(old)]) == 1
    assert "refuses it at container start" in capsys.readouterr().err
