"""cdictk-runtime's argument handling and bundle preparation (the containers run in tests/e2e/test_shim.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.entrypoints.slowpath import slow_path
from cdictk.startpath.shim.main import ShimError, bundle_dir, find_runtime, prepare_bundle, subcommand
from cdictk.startpath.shim.settings import Settings
from cdictk.startpath.specs.parsecache import ParseCache
from tests import REPO
from tests.unit.startpath.shim.test_runtimelog import last_runtime_error

MISSES = slow_path()


def settings(spec_dir: Path) -> Settings:
    result = Settings()
    result.spec_dirs = [str(spec_dir)]
    result.generate_when_missing = False
    result.accept_env_unprivileged = True  # these tests ask through the environment
    return result


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["create", "--bundle", "/b", "id"], "create"),
        (["--root", "/run/runc", "--log", "/l", "--log-format", "json", "create", "id"], "create"),
        (["--debug", "--systemd-cgroup", "start", "id"], "start"),
        (["--root=/x", "run", "id"], "run"),
        (["--root", "/x"], ""),
        ([], ""),
    ],
)
def test_subcommand(args: list[str], expected: str) -> None:
    assert subcommand(args) == expected


def test_bundle_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert bundle_dir(["create", "--bundle", "/b", "id"]) == "/b"
    assert bundle_dir(["create", "-b", "/c", "id"]) == "/c"
    assert bundle_dir(["create", "--bundle=/d", "id"]) == "/d"
    monkeypatch.chdir(tmp_path)
    assert bundle_dir(["create", "id"]) == str(tmp_path)
    assert bundle_dir(["create", "-b", "rel", "id"]) == str(tmp_path / "rel")
    for args in (["create", "--bundle"], ["create", "-b", ""]):
        with pytest.raises(ShimError, match="needs a directory"):
            bundle_dir(args)


def test_find_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "crun"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"relative:{tmp_path}")
    assert find_runtime(["runc-missing", "crun"]) == str(tool)
    assert find_runtime(["/nonexistent/runc", str(tool)]) == str(tool)
    with pytest.raises(ShimError, match="no low-level runtime found"):
        find_runtime(["nope", "/nonexistent/x"])


def write_bundle(tmp_path: Path, config: object) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_container_without_requests_is_left_alone(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path, {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}})
    before = (bundle / "config.json").read_bytes()
    mtime = os.stat(bundle / "config.json").st_mtime_ns
    prepare_bundle(str(bundle), settings(tmp_path / "no-specs"), ParseCache(None), misses=MISSES)
    assert (bundle / "config.json").read_bytes() == before
    assert os.stat(bundle / "config.json").st_mtime_ns == mtime


def test_a_config_that_holds_its_devices_already_is_not_written_again(tmp_path: Path) -> None:
    """podman's precreate hook (or a CDI-aware engine) applied them: the shim leaves config.json as it is."""
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "a.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
        '- name: "0"\n  containerEdits: {deviceNodes: [{path: /dev/null}]}\n'
    )
    bundle = write_bundle(tmp_path, {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}})
    prepare_bundle(str(bundle), settings(tmp_path / "cdi"), ParseCache(None), misses=MISSES)
    assert json.loads((bundle / "config.json").read_bytes())["linux"]["devices"][0]["path"] == "/dev/null"
    before = (bundle / "config.json").read_bytes()
    written = os.stat(bundle / "config.json")
    prepare_bundle(str(bundle), settings(tmp_path / "cdi"), ParseCache(None), misses=MISSES)
    assert (bundle / "config.json").read_bytes() == before
    again = os.stat(bundle / "config.json")
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0,,1"]}}, "empty item"),
        ({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=3"]}}, "nvidia.com/gpu=3"),
        ({"annotations": {"cdi.k8s.io/x": "bad"}}, 'annotation "cdi.k8s.io/x"'),
        ([], "must be a JSON object"),
    ],
)
def test_bad_requests_are_one_line_and_leave_the_config(tmp_path: Path, config: object, message: str) -> None:
    bundle = write_bundle(tmp_path, config)
    before = (bundle / "config.json").read_bytes()
    with pytest.raises(ShimError, match=message) as info:
        prepare_bundle(str(bundle), settings(tmp_path / "no-specs"), ParseCache(None), misses=MISSES)
    assert "\n" not in str(info.value)
    assert (bundle / "config.json").read_bytes() == before


def test_a_missing_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ShimError, match=r"config\.json") as info:
        prepare_bundle(str(tmp_path), settings(tmp_path / "no-specs"), ParseCache(None), misses=MISSES)
    assert "\n" not in str(info.value)


def test_a_node_without_driver_or_spec_is_one_line(tmp_path: Path) -> None:
    """Making the spec in memory on a node without a driver (this test's empty roots) fails clearly."""
    bundle = write_bundle(tmp_path, {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}})
    config = settings(tmp_path / "no-specs")
    config.generate_when_missing = True
    empty = tmp_path / "empty-node"
    empty.mkdir()
    config.driver_root = config.dev_root = str(empty)
    config.proc_root, config.sys_root = str(empty / "proc"), str(empty / "sys")
    before = (bundle / "config.json").read_bytes()
    with pytest.raises(ShimError) as info:
        prepare_bundle(str(bundle), config, ParseCache(None), misses=MISSES)
    assert "\n" not in str(info.value) and str(info.value)
    assert (bundle / "config.json").read_bytes() == before


def test_help_is_the_shims_own(capsys: pytest.CaptureFixture[str]) -> None:
    from cdictk.startpath.shim.main import main

    assert main(["--help"], misses=MISSES) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cdictk-runtime") and "NVIDIA_VISIBLE_DEVICES" in out


def test_a_warning_for_an_ignored_request_and_the_container_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "capabilities": {"bounding": []}}}
    bundle = write_bundle(tmp_path, config)
    before = (bundle / "config.json").read_bytes()
    refusing = settings(tmp_path / "no-specs")
    refusing.accept_env_unprivileged = Settings().accept_env_unprivileged  # the default refuses
    prepare_bundle(str(bundle), refusing, ParseCache(None), misses=MISSES)
    assert (bundle / "config.json").read_bytes() == before
    err = capsys.readouterr().err
    assert err == (
        'cdictk-runtime: warning: NVIDIA_VISIBLE_DEVICES="0" ignored: an unprivileged container\'s '
        "environment grants no GPU (requests.accept-env-unprivileged is false); ask with a CDI name "
        "(--device nvidia.com/gpu=0), a cdi.k8s.io/* annotation, docker run --gpus, or a device plugin's "
        "cdi or volume-mounts strategy\n"
    )


def run_shim(tmp_path: Path, bundle: Path, *global_options: str) -> subprocess.CompletedProcess[str]:
    """The shim's create, as an engine runs it, with settings whose runtime is ``true`` (what it
    would exec) and no spec."""
    config = tmp_path / "cdictk.toml"
    config.write_text(
        f'[runtime]\nruntimes = ["/bin/true"]\nspec-dirs = [{json.dumps(str(tmp_path / "no-specs"))}]\n'
        "[node]\ngenerate-when-missing = false\n"
    )
    env = {"PATH": "/usr/bin:/bin", "CDICTK_CONFIG": str(config), "CDICTK_CACHE_DIR": ""}
    return subprocess.run(
        [sys.executable, "-I", "-m", "cdictk.entrypoints.shim", *global_options, "create", "--bundle", str(bundle), "id"],
        capture_output=True, text=True, env=env, check=False, cwd=REPO,
    )  # fmt: skip


def test_a_refusal_is_the_runtime_logs_last_error(tmp_path: Path) -> None:
    """containerd reports the runtime log's last error (kubectl describe shows it): the shim's line."""
    bundle = write_bundle(tmp_path / "bundle", {"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=9"}})
    log = tmp_path / "log.json"
    result = run_shim(tmp_path, bundle, "--root", "/run/x", "--log", str(log), "--log-format", "json")
    assert result.returncode == 1
    assert result.stderr.startswith("cdictk-runtime: error: nvidia.com/gpu=9: unresolvable CDI device")
    assert result.stderr.count("\n") == 1
    assert last_runtime_error(log) == result.stderr.strip()


def test_a_warning_in_create_goes_to_the_runtime_log_not_the_containers_stderr(tmp_path: Path) -> None:
    bundle = write_bundle(
        tmp_path / "bundle",
        {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"], "capabilities": {"bounding": []}}},
    )
    log = tmp_path / "log.json"
    result = run_shim(tmp_path, bundle, "--log", str(log), "--log-format", "json")
    assert (result.returncode, result.stderr) == (0, "")
    (line,) = log.read_text().splitlines()
    record = json.loads(line)
    assert record["level"] == "warning"
    assert record["msg"].startswith('cdictk-runtime: warning: NVIDIA_VISIBLE_DEVICES="all" ignored: ')
    without_log = run_shim(tmp_path, bundle)
    assert without_log.returncode == 0 and without_log.stderr == record["msg"] + "\n"  # as runc: stderr
