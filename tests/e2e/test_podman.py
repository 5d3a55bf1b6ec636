"""podman 4.x, a real CDI consumer, runs the spec; the config it builds matches `cdictk cdi inject`.

podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi, so the test writes its spec to
/var/run/cdi under a test-only vendor (cdictk.test, never a real vendor's name) and removes it after.
Its storage is private (vfs, under the test's temp dir), so the host's images are never touched.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdictk.cdi.dump import dump_json
from tests.e2e.conftest import ENXIO, IMAGE, FakeGpuHost, Podman, e2e_spec
from tests.e2e.test_runtimes import cdictk

pytestmark = pytest.mark.root

PODMAN_SPEC_DIR = Path("/var/run/cdi")
KIND = "cdictk.test/gpu"


@pytest.fixture
def podman_spec(fake_gpu_host: FakeGpuHost) -> Iterator[Path]:
    PODMAN_SPEC_DIR.mkdir(parents=True, exist_ok=True)
    path = PODMAN_SPEC_DIR / f"cdictk-e2e-{uuid.uuid4().hex[:12]}.json"
    path.write_text(dump_json(e2e_spec(fake_gpu_host, KIND)))
    try:
        yield path
    finally:
        path.unlink()


def built_config(podman: Podman, *create_args: str) -> tuple[str, dict[str, Any]]:
    """The OCI config podman hands its runtime for a container made with ``create_args``."""
    created = podman("create", "--network", "none", *create_args, IMAGE, "true")
    assert created.returncode == 0, created.stderr.decode()
    container = created.stdout.decode().strip()
    try:
        started = podman("init", container)
        assert started.returncode == 0, started.stderr.decode()
        path = podman("inspect", "--format", "{{.OCIConfigPath}}", container).stdout.decode().strip()
        return container, json.loads(Path(path).read_text())
    finally:
        podman("rm", "--force", container)


def test_podman_runs_the_spec(podman: Podman, podman_spec: Path, fake_gpu_host: FakeGpuHost) -> None:
    script = "exec 2>&1; ls -l /dev/nvidia0; cat /dev/nvidia0; ls /dev/nvidia1; cat /mounted/file; echo CDI_TEST=$CDI_TEST"
    result = podman("run", "--rm", "--network", "none", "--device", f"{KIND}=0", IMAGE, "sh", "-c", script)
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode() + out
    assert "195,   0" in out
    assert f"can't open '/dev/nvidia0': {ENXIO}" in out
    assert "ls: /dev/nvidia1: No such file or directory" in out
    assert "hello from the host" in out
    assert "CDI_TEST=hello" in out.splitlines()


def test_podman_config_matches_cdictk_inject(
    podman: Podman, podman_spec: Path, fake_gpu_host: FakeGpuHost, tmp_path: Path
) -> None:
    plain_id, plain = built_config(podman)
    cdi_id, with_cdi = built_config(podman, "--device", f"{KIND}=0")

    # Inject into podman's own config without the device; the two containers differ only by their ids.
    text = json.dumps(plain).replace(plain_id, cdi_id).replace(plain_id[:12], cdi_id[:12])
    config = tmp_path / "config.json"
    config.write_text(text)
    injected = cdictk("cdi", "inject", "--spec-dir", str(PODMAN_SPEC_DIR), "-d", f"{KIND}=0", str(config))
    assert injected.returncode == 0, injected.stderr
    ours = json.loads(config.read_text())

    # podman orders its own env entries at random (a Go map); the CDI ones come after them.
    cdi_env = ["NVIDIA_VISIBLE_DEVICES=void", "CDI_TEST=hello"]
    assert sorted(ours["process"]["env"]) == sorted(with_cdi["process"]["env"])
    assert ours["process"]["env"][-2:] == with_cdi["process"]["env"][-2:] == cdi_env
    assert ours["linux"]["resources"]["devices"] == with_cdi["linux"]["resources"]["devices"]
    assert ours.get("hooks") == with_cdi.get("hooks")
    # podman 4.3 vendors a CDI library older than v1.1.0, which did not copy the host node's mode into
    # fileMode; v1.1.0 does, and so do we.
    assert [device.pop("fileMode") for device in ours["linux"]["devices"]] == [0o666, 0o666]
    assert ours["linux"]["devices"] == with_cdi["linux"]["devices"]

    # podman sorts its mounts again (by depth, then path) after CDI has added its own.
    def by_destination(mounts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(mounts, key=lambda mount: str(mount["destination"]))

    assert by_destination(ours["mounts"]) == by_destination(with_cdi["mounts"])
    assert any(mount["destination"] == "/mounted/file" for mount in ours["mounts"])
