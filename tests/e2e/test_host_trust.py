"""The host side of the trust boundary, each attack replayed by a real user of the node.

A user made for the session (``login_user``) does what any account on a shared node can: make
``/tmp/nvidia-mps`` in the sticky world-writable ``/tmp`` and swap it for a link, own a directory a
spec would be written through. Each test fails without the checks: the container writes into,
or reads, the directory standing in for the host's ``/etc``, or root writes where the user pointed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import LoginUser, Runtime
from tests.e2e.test_runtimes import cdictk, make_bundle
from tests.e2e.test_shim import shim
from tests.fakenode.node import FakeNode, build_node

pytestmark = pytest.mark.root

WRITE_MPS = "cat /tmp/nvidia-mps/secret; echo owned > /tmp/nvidia-mps/owned; echo end"
ACCEPT_ENV = "[requests]\naccept-env-unprivileged = true\n"


@pytest.fixture
def open_node(stub_cache: str, login_user: LoginUser) -> Iterator[FakeNode]:
    """The fake eight-GPU node where a user can reach it, its /tmp sticky and world-writable like the
    host's, without the MPS directory; and beside it ``etc``, root's, standing in for the host's /etc."""
    base = Path(tempfile.mkdtemp(prefix="cdictk-e2e-node-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        node = build_node(str(base / "node"), "eight", stub_cache)
        os.chmod(node.root + "/tmp", 0o1777)
        os.rmdir(node.root + "/tmp/nvidia-mps")
        (base / "etc").mkdir()
        (base / "etc" / "secret").write_text("root's secret\n")
        os.chmod(base / "etc" / "secret", 0o600)
        yield node
    finally:
        shutil.rmtree(base, ignore_errors=True)


def standin(node: FakeNode) -> Path:
    return Path(node.root).parent / "etc"


def generate(node: FakeNode, spec_dir: Path) -> tuple[dict[str, list[str]], str]:
    """The node's spec written to ``spec_dir`` by root; its mounts (container path: options), stderr."""
    spec_dir.mkdir(exist_ok=True)
    output = spec_dir / "nvidia.json"
    made = cdictk(
        "cdi",
        "generate",
        *node.cli_args(),
        "--disable-hook",
        "all",
        "--format",
        "json",
        "--output",
        str(output),
    )
    assert made.returncode == 0, made.stderr
    spec = json.loads(output.read_text())
    return {m["containerPath"]: m.get("options", []) for m in spec["containerEdits"]["mounts"]}, made.stderr


def run_through_shim(runtime: Runtime, spec_dir: Path, rootfs: Path, tmp_path: Path) -> tuple[int, str]:
    bundle = make_bundle(tmp_path / f"bundle-{uuid.uuid4().hex[:8]}", rootfs, WRITE_MPS)
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=1")  # GPU 0 is in MIG mode
    (bundle / "config.json").write_text(json.dumps(config))
    result = shim(
        runtime,
        spec_dir,
        "run",
        "--bundle",
        str(bundle),
        f"cdictk-trust-{uuid.uuid4().hex[:8]}",
        extra=ACCEPT_ENV,
    )
    return result.returncode, result.stdout + result.stderr


def test_a_users_mps_directory_swapped_for_a_link_never_reaches_the_hosts_etc(
    runtime: Runtime, rootfs: Path, open_node: FakeNode, login_user: LoginUser, tmp_path: Path
) -> None:
    """Attack 1: the user makes /tmp/nvidia-mps before the spec is written, then swaps it for a link to
    /etc. Without the check the spec mounts it read-write and the container writes into the host's /etc."""
    mps = open_node.root + "/tmp/nvidia-mps"
    made = login_user.run("mkdir", mps)
    assert made.returncode == 0, made.stderr
    mounts, warnings = generate(open_node, tmp_path / "cdi")
    swapped = login_user.run("sh", "-c", f"mv {mps} {mps}.old && ln -s {standin(open_node)} {mps}")
    assert swapped.returncode == 0, swapped.stderr
    code, out = run_through_shim(runtime, tmp_path / "cdi", rootfs, tmp_path)
    assert sorted(os.listdir(standin(open_node))) == ["secret"], "the container wrote into the host's /etc"
    assert "root's secret" not in out
    assert code == 0 and "end" in out, out
    assert "/tmp/nvidia-mps" not in mounts
    assert f"{mps}: owned by uid {login_user.uid}" in warnings


def test_a_link_planted_before_generate_never_becomes_a_host_path(
    open_node: FakeNode, login_user: LoginUser, tmp_path: Path
) -> None:
    """Attack 1, the other order: ``/tmp/nvidia-mps -> /etc``, planted first. Without the check the link's
    target (the node's /etc: the driver root is the fake node's) goes straight into the spec's hostPath."""
    mps = open_node.root + "/tmp/nvidia-mps"
    planted = login_user.run("ln", "-s", "/etc", mps)
    assert planted.returncode == 0, planted.stderr
    mounts, warnings = generate(open_node, tmp_path / "cdi")
    assert "/tmp/nvidia-mps" not in mounts
    spec = json.loads((tmp_path / "cdi" / "nvidia.json").read_text())
    assert open_node.root + "/etc" not in [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
    assert f"{mps}: owned by uid {login_user.uid}" in warnings


def test_a_spec_written_while_the_directory_was_roots_is_refused_once_a_user_took_it(
    runtime: Runtime, rootfs: Path, open_node: FakeNode, login_user: LoginUser, tmp_path: Path
) -> None:
    """Item 2: generate saw root's MPS directory; since, the daemon stopped, /tmp was cleaned and the
    user put a link there. The container must not start, and nothing of the host's /etc is read."""
    mps = Path(open_node.root + "/tmp/nvidia-mps")
    mps.mkdir()
    generate(open_node, tmp_path / "cdi")
    mps.rmdir()
    planted = login_user.run("ln", "-s", str(standin(open_node)), str(mps))
    assert planted.returncode == 0, planted.stderr
    code, out = run_through_shim(runtime, tmp_path / "cdi", rootfs, tmp_path)
    assert "root's secret" not in out, "the container read the host's /etc"
    assert sorted(os.listdir(standin(open_node))) == ["secret"], "the container wrote into the host's /etc"
    assert code != 0 and "end" not in out.splitlines(), out
    lines = [line for line in out.splitlines() if "cdictk-runtime: error:" in line]
    assert len(lines) == 1, out
    assert (
        f"{mps}: owned by uid {login_user.uid}" in lines[0]
        and "refusing to give it to a container" in lines[0]
    )
    assert sorted(os.listdir(standin(open_node))) == ["secret"]


def test_generate_never_writes_through_a_users_directory_or_link(
    open_node: FakeNode, login_user: LoginUser
) -> None:
    """Attack 3: the user makes /tmp/pub and links /tmp/pub/specs to a directory of root's; root runs
    ``generate --output /tmp/pub/specs/nvidia.yaml``. Without the check root writes into the link's
    target, or into the user's directory (``wrote ...``, exit 0), where they could swap it at will."""
    pub = Path(f"/tmp/cdictk-e2e-pub-{uuid.uuid4().hex[:8]}")
    target = standin(open_node)
    try:
        made = login_user.run("sh", "-c", f"mkdir {pub} && ln -s {target} {pub}/specs")
        assert made.returncode == 0, made.stderr
        for output in (pub / "specs" / "nvidia.yaml", pub / "nvidia.yaml"):
            result = cdictk("cdi", "generate", *open_node.cli_args(), "--output", str(output))
            assert sorted(os.listdir(target)) == ["secret"], "root wrote where the user's link points"
            assert sorted(os.listdir(pub)) == ["specs"], "root wrote into the user's directory"
            assert result.returncode == 1, result.stderr
            errors = [line for line in result.stderr.splitlines() if line.startswith("cdictk: error:")]
            assert len(errors) == 1 and f"owned by uid {login_user.uid}" in errors[0], result.stderr
    finally:
        shutil.rmtree(pub, ignore_errors=True)
