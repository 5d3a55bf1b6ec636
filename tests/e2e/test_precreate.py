"""podman with cdictk's precreate hook (hooks.d): GPU requests in the environment become CDI devices."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from cdictk.cdi.dump import dump_yaml
from cdictk.runtime.launchers import install_launchers
from tests.e2e.conftest import ENXIO, IMAGE, FakeGpuHost, Podman, e2e_spec

pytestmark = pytest.mark.root

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


# Whose annotations: podman copies the image's own into the config.

EVIL = "localhost/cdictk-e2e-evil-annotation:latest"


@pytest.fixture(scope="module")
def evil_image(podman: Podman) -> str:
    """The busybox image with ``cdi.k8s.io/evil=nvidia.com/gpu=0,nvidia.com/gpu=1`` (every GPU of the
    test node) in its own annotations, as ``buildah config --annotation`` puts it there."""
    buildah = [
        "buildah",
        "--root", str(podman.root / "root"),
        "--runroot", str(podman.root / "runroot"),
        "--storage-driver", "vfs",
    ]  # fmt: skip

    def run(*args: str) -> str:
        result = subprocess.run(
            [*buildah, *args], capture_output=True, text=True, env=podman.env, check=False
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (tests/setup-host.sh installs it, with podman)")
    working = run("from", IMAGE)
    try:
        run("config", "--annotation", "cdi.k8s.io/evil=nvidia.com/gpu=0,nvidia.com/gpu=1", working)
        run("commit", "-q", working, EVIL)
    finally:
        run("rm", working)
    return EVIL


def probe(podman: Podman, image: str, *args: str) -> tuple[int, str]:
    script = "exec 2>&1; ls /dev/nvidia0 /dev/nvidia1; echo end"
    result = podman("run", "--rm", "--network", "none", *args, image, "sh", "-c", script)
    return result.returncode, result.stdout.decode() + result.stderr.decode()


def test_an_images_own_annotation_grants_no_gpu_through_the_hook(
    podman: Podman, hooks_dir: Path, evil_image: str
) -> None:
    """The image's own annotation is not podman's request: taken as one, it would give every GPU."""
    code, out = probe(podman, evil_image, "--hooks-dir", str(hooks_dir))
    assert "ls: /dev/nvidia0: No such file or directory" in out and code == 0, out
    assert "ls: /dev/nvidia1: No such file or directory" in out


def test_podman_annotations_ask_only_where_the_operator_accepts_them(
    podman: Podman, hooks_dir: Path, tmp_path: Path
) -> None:
    """``podman run --annotation`` cannot be told from the image's: ignored by default (ask with
    podman's own --device, tests/e2e/test_podman.py), honoured with accept-copied-annotations."""
    asked = ("--hooks-dir", str(hooks_dir), "--annotation", "cdi.k8s.io/gpu=nvidia.com/gpu=0")
    code, out = probe(podman, IMAGE, *asked)
    assert code == 0 and "ls: /dev/nvidia0: No such file or directory" in out, out
    settings = tmp_path / "config.toml"
    settings.write_text(settings.read_text() + "accept-copied-annotations = true\n")
    code, out = probe(podman, IMAGE, *asked)
    assert code == 0 and "/dev/nvidia0\n" in out and "ls: /dev/nvidia1: No such file or directory" in out, out


def test_an_images_own_annotation_grants_no_gpu_through_the_shim(
    podman: Podman, evil_image: str, tmp_path: Path
) -> None:
    """podman with ``--runtime cdictk-runtime``: the same config, the same answer. conmon gives the
    runtime no environment of podman's, so the shim reads the node's settings and spec dirs: a
    privileged request shows it is in the path (a device, or its one line where the node has none)."""
    install_launchers(str(tmp_path / "launchers"))
    front = str(tmp_path / "launchers" / "cdictk-runtime")
    code, out = probe(podman, IMAGE, "--runtime", front, "--privileged", "-e", "NVIDIA_VISIBLE_DEVICES=0")
    assert "/dev/nvidia0\n" in out or "cdictk-runtime: error: " in out, out
    code, out = probe(podman, evil_image, "--runtime", front)
    assert code == 0 and "ls: /dev/nvidia0: No such file or directory" in out, out


def test_the_shim_after_the_precreate_hook_applies_nothing_twice(
    podman: Podman, hooks_dir: Path, tmp_path: Path, fake_gpu_host: FakeGpuHost
) -> None:
    """podman runs the precreate hook, then creates the container through cdictk-runtime, and both meet
    the annotation's request: the shim finds every edit in the config already and leaves it alone, so
    the spec's hook runs once (the CDI library would add the hook and the cgroup rules again)."""
    settings = tmp_path / "config.toml"  # podman's annotations: this node takes them (docs/security.md)
    settings.write_text(settings.read_text() + "accept-copied-annotations = true\n")
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
