"""The daemon harness works: each daemon starts on its private socket, reads the config it is given and
runs the busybox image. Later tests use the same harness to check the configs `cdictk runtime configure`
writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE
from tests.e2e.daemons import (
    RUNC,
    containerd_daemon,
    containerd_major,
    distro_containerd_dir,
    dockerd_daemon,
    image_tar_fixture,  # noqa: F401  (pytest finds the image_tar fixture through this import)
    sid_containerd_dir,
)

pytestmark = pytest.mark.root

MARKER = "cdictk-e2e-marker"

PROBE_RUNTIME_V2 = f"""\
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.probe]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.probe.options]
    BinaryName = "{RUNC}"
"""


def test_the_distros_containerd_dumps_a_runtime_entry_of_a_v2_config() -> None:
    """containerd 1.x keeps a version 2 config as it is; 2.x migrates it to version 3 on load."""
    binary_dir = distro_containerd_dir()
    with containerd_daemon(binary_dir, PROBE_RUNTIME_V2) as containerd:
        dumped = containerd.dump_config()
    if containerd_major(binary_dir) == 1:
        assert dumped["version"] == 2
        plugin = "io.containerd.grpc.v1.cri"
    else:
        assert dumped["version"] == 3
        plugin = "io.containerd.cri.v1.runtime"
    runtimes = dumped["plugins"][plugin]["containerd"]["runtimes"]
    assert runtimes["probe"]["runtime_type"] == "io.containerd.runc.v2"
    assert runtimes["probe"]["options"]["BinaryName"] == RUNC


def test_containerd_2_runs_the_image(image_tar: Path) -> None:
    with containerd_daemon(sid_containerd_dir(), "version = 3\n") as containerd:
        version = containerd.ctr("version")
        assert version.returncode == 0, version.stderr
        assert "Version:  2." in version.stdout.split("Server:")[1]
        containerd.import_image(image_tar)
        result = containerd.run(IMAGE, ["sh", "-c", f"echo {MARKER}"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [MARKER]


@pytest.fixture
def cdi_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "cdi"
    directory.mkdir()
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "cdictk.test/gpu",
        "devices": [{"name": "x", "containerEdits": {"env": ["CDI_PROBE=1"]}}],
    }
    (directory / "probe.json").write_text(json.dumps(spec))
    return directory


def test_dockerd_28_runtime_and_cdi(image_tar: Path, cdi_dir: Path) -> None:
    daemon_json = {
        "runtimes": {"probe": {"path": RUNC}},
        "features": {"cdi": True},
        "cdi-spec-dirs": [str(cdi_dir)],
    }
    with dockerd_daemon(daemon_json) as docker:
        info = docker.info()
        assert info["ServerVersion"].startswith("28."), info["ServerVersion"]
        assert info["Runtimes"]["probe"]["path"] == RUNC
        assert info["CDISpecDirs"] == [str(cdi_dir)]
        docker.load_image(image_tar)

        with_runtime = docker.run(IMAGE, ["sh", "-c", f"echo {MARKER}"], runtime="probe")
        assert with_runtime.returncode == 0, with_runtime.stderr
        assert with_runtime.stdout.splitlines() == [MARKER]

        with_device = docker.run(
            IMAGE, ["sh", "-c", "echo CDI_PROBE=$CDI_PROBE"], cdi_devices=["cdictk.test/gpu=x"]
        )
        assert with_device.returncode == 0, with_device.stderr
        assert with_device.stdout.splitlines() == ["CDI_PROBE=1"]
