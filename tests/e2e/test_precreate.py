"""podman with cdictk's precreate hook (hooks.d): GPU requests in the environment become CDI devices."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from cdictk.cdi.dump import dump_yaml
from cdictk.runtime.launchers import install_launchers
from tests.e2e.conftest import ENXIO, IMAGE, FakeGpuHost, Podman, e2e_spec

SHIPPED = Path(__file__).resolve().parents[2] / "hooks" / "oci-hooks.d" / "cdictk-precreate.json"


@pytest.fixture
def hooks_dir(tmp_path: Path, fake_gpu_host: FakeGpuHost) -> Path:
    """The shipped hook file, pointed at this checkout's Python and a private spec dir and settings."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "e2e.yaml").write_text(dump_yaml(e2e_spec(fake_gpu_host, "nvidia.com/gpu")))
    settings = tmp_path / "config.toml"
    # These tests ask through the environment, which the default refuses (one test shows it).
    settings.write_text(
        f"[runtime]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n[requests]\naccept-env-unprivileged = true\n"
    )
    hook = json.loads(SHIPPED.read_text())
    assert hook["stages"] == ["precreate"] and hook["hook"]["env"]
    launcher = install_launchers(str(tmp_path / "launchers"))[1]  # what the README installs
    hook["hook"]["path"] = launcher
    hook["hook"]["args"] = ["cdictk-precreate"]
    hook["hook"]["env"] += [f"CDICTK_CONFIG={settings}", f"CDICTK_CACHE_DIR={os.environ['CDICTK_CACHE_DIR']}"]
    directory = tmp_path / "hooks.d"
    directory.mkdir()
    (directory / SHIPPED.name).write_text(json.dumps(hook))
    return directory


def run(podman: Podman, hooks_dir: Path, *env: str) -> tuple[int, str, str]:
    script = "exec 2>&1; cat /dev/nvidia0; ls /dev/nvidia1; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES"
    args = [arg for pair in (("-e", value) for value in env) for arg in pair]
    result = podman(
        "--hooks-dir", str(hooks_dir), "run", "--rm", "--network", "none", *args, IMAGE, "sh", "-c", script
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def test_visible_devices_through_the_precreate_hook(podman: Podman, hooks_dir: Path) -> None:
    code, out, err = run(podman, hooks_dir, "NVIDIA_VISIBLE_DEVICES=0")
    assert code == 0, err + out
    assert f"can't open '/dev/nvidia0': {ENXIO}" in out
    assert "ls: /dev/nvidia1: No such file or directory" in out
    assert "VISIBLE=void" in out


def test_no_request_and_bad_requests(podman: Podman, hooks_dir: Path) -> None:
    code, out, err = run(podman, hooks_dir)
    assert code == 0, err + out
    assert "cat: can't open '/dev/nvidia0': No such file or directory" in out
    code, out, err = run(podman, hooks_dir, "NVIDIA_VISIBLE_DEVICES=7")
    # podman 4.3 reports only the hook's exit status; the container is not created.
    assert code != 0 and "setting up OCI Hooks" in err, err
    assert "VISIBLE=" not in out


def test_the_shim_after_the_precreate_hook_applies_nothing_twice(
    podman: Podman, hooks_dir: Path, tmp_path: Path, fake_gpu_host: FakeGpuHost
) -> None:
    """podman runs the precreate hook, then creates the container through cdictk-runtime, and both meet
    the annotation's request: the shim finds every edit in the config already and leaves it alone, so
    the spec's hook runs once (the CDI library would add the hook and the cgroup rules again)."""
    front = install_launchers(str(tmp_path / "shim"))[-1]
    # podman gives conmon, and so the runtime, an environment of its own: the settings go in a wrapper.
    runtime = tmp_path / "shim" / "runtime.sh"
    runtime.write_text(
        f"#!/bin/sh\nexport CDICTK_CONFIG={tmp_path / 'config.toml'} "
        f'CDICTK_CACHE_DIR={os.environ["CDICTK_CACHE_DIR"]}\nexec {front} "$@"\n'
    )
    runtime.chmod(0o755)
    marker = uuid.uuid4().hex
    result = podman(
        "--hooks-dir", str(hooks_dir), "--runtime", str(runtime), "run", "--rm", "--network", "none",
        "--annotation", "cdi.k8s.io/gpu=nvidia.com/gpu=0", "--annotation", f"cdictk.test/run={marker}",
        IMAGE, "sh", "-c", "cat /dev/nvidia0 2>&1; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES",
    )  # fmt: skip
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode() + out
    assert f"can't open '/dev/nvidia0': {ENXIO}" in out and "VISIBLE=void" in out
    (config,) = [
        loaded
        for path in fake_gpu_host.hook_log.glob("*.config.json")
        if (loaded := json.loads(path.read_text())).get("annotations", {}).get("cdictk.test/run") == marker
    ]
    assert len(config["hooks"]["createContainer"]) == 1
    rules = config["linux"]["resources"]["devices"]
    assert [(rule.get("major"), rule.get("minor")) for rule in rules].count((195, 0)) == 1
    assert config["process"]["env"].count("CDI_TEST=hello") == 1
