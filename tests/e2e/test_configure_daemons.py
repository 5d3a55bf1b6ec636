"""Real daemons read what `cdictk runtime configure` writes.

- containerd 1.6 (Debian's) and 2.1: the configure run starts from the daemon's own `config default`
  output (a real, complete config), and `config dump` afterwards shows everything it showed before,
  plus the runtime (and, on 2.1, CDI). containerd 2.1 then boots on the patched config, runs a
  container, and runs one with `ctr run --device nvidia.com/gpu=0` from a spec generated for the fake
  node (ctr resolves CDI from /var/run/cdi itself).
- dockerd 28 boots on the patched daemon.json, runs a container through the configured runtime (it is
  the default one), and `docker run --device nvidia.com/gpu=0` works against a private cdi-spec-dirs.
The configured runtime's binary is runc itself: the shim that will normally sit there is not needed
to prove that the engines read the entry.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeFactory
from tests.e2e.conftest import ENXIO, IMAGE
from tests.e2e.daemons import (
    RUNC,
    Containerd,
    containerd_daemon,
    distro_containerd_dir,
    dockerd_daemon,
    image_tar_fixture,  # noqa: F401  (pytest finds the image_tar fixture through this import)
    sid_containerd_dir,
)
from tests.fakenode.node import FakeNode

pytestmark = pytest.mark.root

INSIDE = "cat /dev/nvidia0; ls /dev/nvidia1; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES"


def cdictk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdictk", *args], capture_output=True, text=True, check=False
    )


def default_config(binary_dir: Path) -> str:
    result = subprocess.run(
        [str(binary_dir / "containerd"), "config", "default"], capture_output=True, text=True, check=True
    )
    return result.stdout


def configure_containerd(tmp_path: Path, text: str) -> tuple[Path, Path]:
    config, drop_in = tmp_path / "etc" / "config.toml", tmp_path / "etc" / "conf.d" / "99-cdictk.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    result = cdictk(
        "runtime", "configure", "--runtime", "containerd", "--config", str(config),
        "--drop-in-config", str(drop_in), "--runtime-path", RUNC, "--set-as-default", "--enable-cdi",
        "--cdi-spec-dir", "/etc/cdi", "--cdi-spec-dir", "/var/run/cdi",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return config, drop_in


def without_ours(dumped: dict[str, Any], plugin: str) -> dict[str, Any]:
    """The dump minus what configure adds, to compare with the dump from before."""
    dumped = copy.deepcopy(dumped)
    dumped.pop("imports", None)
    cri = dumped["plugins"][plugin]
    del cri["containerd"]["runtimes"]["cdictk"]
    for key in ("enable_cdi", "cdi_spec_dirs"):
        cri.pop(key, None)
    cri["containerd"].pop("default_runtime_name", None)
    return dumped


@pytest.mark.parametrize("which", ["distro", "sid"])
def test_config_dump_keeps_everything_and_adds_the_runtime(tmp_path: Path, which: str) -> None:
    """The distribution's containerd (1.6 on bookworm, 2.2 on Ubuntu 24.04) and sid's 2.1."""
    binary_dir = distro_containerd_dir() if which == "distro" else sid_containerd_dir()
    original = default_config(binary_dir)
    version = tomllib.loads(original)["version"]
    plugin = "io.containerd.grpc.v1.cri" if version == 2 else "io.containerd.cri.v1.runtime"
    with containerd_daemon(binary_dir, original) as before:
        dumped_before = before.dump_config()
    config, drop_in = configure_containerd(tmp_path, original)
    # The main file changes by its imports line alone, which gains the drop-in (upstream's default
    # config has `imports = []`, Ubuntu's names its own conf.d glob).
    old_lines, new_lines = original.splitlines(), config.read_text().splitlines()
    changed = [(old, new) for old, new in zip(old_lines, new_lines, strict=True) if old != new]
    assert len(changed) == 1 and changed[0][0].startswith("imports = "), changed
    imports = tomllib.loads(original).get("imports", [])
    assert tomllib.loads(config.read_text())["imports"] == [*imports, str(drop_in)]
    with containerd_daemon(binary_dir, config.read_text()) as after:
        dumped_after = after.dump_config()
        runtime = dumped_after["plugins"][plugin]["containerd"]["runtimes"]["cdictk"]
        assert runtime["runtime_type"] == "io.containerd.runc.v2"
        assert runtime["options"]["BinaryName"] == RUNC
        assert dumped_after["plugins"][plugin]["containerd"]["default_runtime_name"] == "cdictk"
        if version == 3:  # 1.6's dump leaves the CDI settings out whatever the file says
            assert dumped_after["plugins"][plugin]["enable_cdi"] is True
            assert dumped_after["plugins"][plugin]["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
        # containerd 1.6 replaces whole plugin tables on import: nothing of the CRI table may be lost.
        before_cmp = copy.deepcopy(dumped_before)
        before_cmp["plugins"][plugin]["containerd"].pop("default_runtime_name", None)
        for key in ("enable_cdi", "cdi_spec_dirs"):
            before_cmp["plugins"][plugin].pop(key, None)
        before_cmp.pop("imports", None)
        assert without_ours(dumped_after, plugin) == before_cmp
    assert drop_in.exists()


@pytest.fixture
def node_spec_in_var_run_cdi(make_node: NodeFactory) -> Iterator[FakeNode]:
    """A spec generated for the fake node where ctr looks for specs (/var/run/cdi), removed afterwards."""
    node = make_node("single")
    spec = Path("/var/run/cdi") / f"cdictk-e2e-{uuid.uuid4().hex[:12]}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    generated = cdictk("cdi", "generate", *node.cli_args(), "--disable-hook", "all", "--output", str(spec))
    assert generated.returncode == 0, generated.stderr
    try:
        yield node
    finally:
        spec.unlink()


def check_gpu_container(out: str) -> None:
    assert f"can't open '/dev/nvidia0': {ENXIO}" in out, out
    assert "ls: /dev/nvidia1: No such file or directory" in out
    assert "VISIBLE=void" in out.splitlines()


def test_containerd_2_runs_containers_on_the_patched_config_and_cdi_devices(
    tmp_path: Path, image_tar: Path, node_spec_in_var_run_cdi: FakeNode
) -> None:
    binary_dir = sid_containerd_dir()
    config, _ = configure_containerd(tmp_path, default_config(binary_dir))
    with containerd_daemon(binary_dir, config.read_text()) as containerd:
        assert_cri_loaded(containerd)
        containerd.import_image(image_tar)
        plain = containerd.run(IMAGE, ["sh", "-c", "echo through-runc"])
        assert plain.returncode == 0 and plain.stdout.strip() == "through-runc", plain.stderr
        gpu = containerd.run(
            IMAGE, ["sh", "-c", f"exec 2>&1; {INSIDE}"], options=["--device", "nvidia.com/gpu=0"]
        )
    assert gpu.returncode == 0, gpu.stderr + gpu.stdout
    check_gpu_container(gpu.stdout)


def assert_cri_loaded(containerd: Containerd) -> None:
    plugins = containerd.ctr("plugins", "ls")
    cri = [
        line
        for line in plugins.stdout.splitlines()
        if "io.containerd.cri.v1" in line or ".grpc.v1.cri" in line
    ]
    assert cri and all("error" not in line for line in cri), plugins.stdout


def test_dockerd_28_uses_the_configured_runtime_and_cdi(
    tmp_path: Path, image_tar: Path, make_node: NodeFactory
) -> None:
    node = make_node("single")
    spec_dir = tmp_path / "cdi"
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
    daemon_json = tmp_path / "daemon.json"
    # A user's file: its key order, indentation, other features and a big integer must survive.
    daemon_json.write_text(
        '{\n  "log-level": "warn",\n  "features": {"buildkit": true},\n  "max-download-attempts": 5\n}\n'
    )
    result = cdictk(
        "runtime", "configure", "--runtime", "docker", "--config", str(daemon_json), "--runtime-path", RUNC,
        "--set-as-default", "--enable-cdi", "--cdi-spec-dir", str(spec_dir),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    patched = json.loads(daemon_json.read_text())
    assert list(patched)[:3] == ["log-level", "features", "max-download-attempts"]
    assert patched["features"] == {"buildkit": True, "cdi": True}
    with dockerd_daemon(patched) as docker:
        info = docker.info()
        assert info["DefaultRuntime"] == "cdictk" and info["Runtimes"]["cdictk"]["path"] == RUNC
        assert info["CDISpecDirs"] == [str(spec_dir)]
        docker.load_image(image_tar)
        plain = docker.run(IMAGE, ["sh", "-c", "echo through-cdictk-entry"])
        assert plain.returncode == 0 and "through-cdictk-entry" in plain.stdout, plain.stderr
        gpu = docker.run(IMAGE, ["sh", "-c", f"exec 2>&1; {INSIDE}"], cdi_devices=["nvidia.com/gpu=0"])
    assert gpu.returncode == 0, gpu.stderr + gpu.stdout
    check_gpu_container(gpu.stdout)
