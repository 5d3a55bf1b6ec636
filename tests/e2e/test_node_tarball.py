"""The node tarball (``make node-tarball``) on nodes without a usable Python, as the README's node
operator uses it (slow: it is made from ``make image``'s image, CI's in ``CDICTK_IMAGE_DIR`` or one
built here).

Each node is a root made the root of a private mount namespace (tests/e2e/runtimebuild.py), with a
``systemctl`` that records what it is asked (no systemd runs there):

- busybox only: the tarball unpacked by the node's own busybox tar, ``cdictk system install`` run from
  it, then the README's commands through the ``cdictk`` it linked on PATH on a fake GPU node, and a
  container's createContainer hook run from the spec as runc runs it (runc needs a glibc); and the
  uninstall, after which the node is as it was;
- Ubuntu 22.04 minbase (glibc 2.35, no Python): the same install, and runc runs a container through
  the generated spec's hook, whose ld cache then holds the driver's libraries.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.noderuntime import manifest
from nodeimage import makeimage, nodetarball
from tests.e2e.conftest import (
    DEBIAN_ROOTFS,
    fetch_minbase,
    overlay,
    require_tool,
)
from tests.e2e.runtimebuild import run
from tests.e2e.test_node_runtime import (
    CONTAINER,
    GPU_NODE,
    HOOK,
    PREFIX,
    Node,
    check_ld_cache,
    gpu_container_hook_runs,
    hook_command,
    new_busybox_node,
    write_bundle,
)
from tests.fakenode.node import build_node

pytestmark = [pytest.mark.slow, pytest.mark.root]

TOP = nodetarball.name()
SYSTEMCTL_LOG = "/var/log/systemctl.log"
CONTAINERD = "/etc/containerd/config.toml"
ROOTS = ("--driver-root", GPU_NODE, "--proc-root", f"{GPU_NODE}/proc", "--sys-root", f"{GPU_NODE}/sys")
SPEC = "/var/run/cdi/nvidia.yaml"


@pytest.fixture(scope="module")
def tarballs(node_image: makeimage.Built, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The tarball made twice from the image's runtime, as `make node-tarball` makes it."""
    out = tmp_path_factory.mktemp("tarball")
    return [nodetarball.build(node_image.layout.parent, out / name).path for name in ("a", "b")]


@pytest.fixture
def tarball(tarballs: list[Path]) -> Path:
    return tarballs[0]


def with_systemctl(node: Node) -> Node:
    """A ``systemctl`` on the node's PATH that writes its arguments to SYSTEMCTL_LOG."""
    fake = node.path("/usr/local/sbin/systemctl")
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text(f'#!/bin/sh\necho "$*" >>{SYSTEMCTL_LOG}\n')
    fake.chmod(0o755)
    node.path(SYSTEMCTL_LOG).parent.mkdir(parents=True, exist_ok=True)
    return node


@pytest.fixture
def busybox_node(tmp_path: Path) -> Node:
    return with_systemctl(new_busybox_node(tmp_path / "node"))


@pytest.fixture
def jammy_node(tmp_path: Path) -> Iterator[Node]:
    """A fresh overlay of Ubuntu 22.04 minbase (no Python), with runc (this machine's: its glibc is older)."""
    found = fetch_minbase("jammy")["jammy"]
    if not isinstance(found, Path):
        pytest.skip(found)
    assert not (found / "usr/bin/python3").exists()
    runc = require_tool("runc")
    with overlay(found, tmp_path / "node") as root:
        run(["cp", runc, str(root / "usr/local/sbin/runc")])
        yield with_systemctl(Node(root))


def unpack_and_install(node: Node, tarball: Path, *options: str) -> str:
    """The README's two commands: the tarball unpacked in /root by the node's tar, and installed by
    the cdictk in it (a relative path, as the operator types it); the install's output."""
    node.path("/root").mkdir(exist_ok=True)
    run(["cp", str(tarball), str(node.path(f"/root/{tarball.name}"))])
    node.run("/bin/sh", "-c", f"cd /root && tar xzf {tarball.name}")
    return node.run("/bin/sh", "-c", f"cd /root && ./{TOP}/bin/cdictk system install {' '.join(options)}")


def test_the_same_image_gives_the_same_tarball(tarballs: list[Path], tmp_path: Path) -> None:
    """Byte for byte; one directory, the runtime exactly (its manifest holds), root's, time 0."""
    first, again = tarballs
    assert first.name == f"{TOP}-x86_64.tar.gz"
    assert first.read_bytes() == again.read_bytes()
    run(["tar", "-xzf", str(first), "-C", str(tmp_path)])
    assert [path.name for path in tmp_path.iterdir()] == [TOP]
    entries = manifest.read(str(tmp_path / TOP))[1]
    assert manifest.mismatch(str(tmp_path / TOP), entries) is None
    with tarfile.open(first) as tar:
        members = tar.getmembers()
    assert {(member.uid, member.gid, member.uname, member.gname, member.mtime) for member in members} == {
        (0, 0, "", "", 0)
    }


def test_a_busybox_node_installs_it_and_runs_the_readmes_commands(
    tarball: Path, busybox_node: Node, stub_cache: str, tmp_path: Path
) -> None:
    node = busybox_node
    out = unpack_and_install(node, tarball, "--runtime", "containerd", "--config", CONTAINERD)
    assert "installed (copied)" in out, out
    assert node.path("/usr/local/bin/cdictk").readlink() == Path(f"{PREFIX}/bin/cdictk")
    for name in ("cdictk-cdi-watch.service", "cdictk-cdi-refresh.service", "cdictk-cdi-refresh.path"):
        unit = node.path(f"/etc/systemd/system/{name}").read_text()
        assert f"{PREFIX}/bin/cdictk" in unit and "/usr/local/bin" not in unit
    assert node.path(SYSTEMCTL_LOG).read_text().splitlines() == [
        "daemon-reload",
        "enable cdictk-cdi-watch.service",
        "restart cdictk-cdi-watch.service",
    ]
    drop_in = node.path("/etc/containerd/conf.d/99-cdictk.toml").read_text()
    assert f'BinaryName = "{PREFIX}/bin/cdictk-runtime"' in drop_in and "enable_cdi = true" in drop_in

    # The README's commands, through the cdictk on PATH, on a fake one-GPU node.
    build_node(str(node.path(GPU_NODE)), "single", stub_cache)
    node.path(f"{GPU_NODE}/dev/nvidia-uvm-tools").unlink()
    out = node.run("cdictk", "system", "create-device-nodes", "--driver-root", GPU_NODE, "--proc-root",
                   f"{GPU_NODE}/proc")  # fmt: skip
    assert "nvidia-uvm-tools" in out and node.path(f"{GPU_NODE}/dev/nvidia-uvm-tools").is_char_device()
    node.run("cdictk", "cdi", "generate", *ROOTS, "--output", SPEC)
    assert f"path: {HOOK}\n" in node.path(SPEC).read_text()
    out = node.run("cdictk", "info", *ROOTS)
    assert "cdictk-runtime registered" in out, out
    out = node.run("cdictk", "runtime", "configure", "--runtime", "containerd", "--config", CONTAINERD)
    assert f"registering {PREFIX}/bin/cdictk-runtime" in out and f"{CONTAINERD}: unchanged" in out, out

    # A container given the GPU: its createContainer hook run as runc runs it.
    gpu_container_hook_runs(node, "cdictk", tmp_path / "image")


def test_an_ubuntu_2204_node_runs_a_container_through_the_installed_runtime(
    tarball: Path, jammy_node: Node, stub_cache: str, tmp_path: Path
) -> None:
    node = jammy_node
    out = unpack_and_install(node, tarball, "--runtime", "docker", "--spec-service", "refresh")
    assert "installed (copied)" in out, out
    assert json.loads(node.path("/etc/docker/daemon.json").read_text())["features"] == {"cdi": True}
    assert node.path("/etc/udev/rules.d/99-cdictk-cdi-refresh.rules").is_file()
    build_node(str(node.path(GPU_NODE)), "single", stub_cache)
    node.run("cdictk", "cdi", "generate", *ROOTS, "--output", "/etc/cdi/nvidia.yaml")
    write_bundle(node, ["/sbin/ldconfig", "-p"])
    node.run("cdictk", "cdi", "inject", "-d", "nvidia.com/gpu=0", f"{CONTAINER}/config.json")
    hook_command(node)
    runc = ["runc", "--root", "/run/runc", "run", "--bundle", CONTAINER, "c1"]
    with overlay(DEBIAN_ROOTFS, tmp_path / "image") as rootfs:
        check_ld_cache(node.run(*runc, binds=((str(rootfs), f"{CONTAINER}/rootfs"),)))


def test_uninstall_leaves_the_node_as_it_was(tarball: Path, busybox_node: Node, stub_cache: str) -> None:
    """Every step undone: units, hooks, links, the engine's config, the spec that names the runtime's
    hook, the directories made for them, the runtime."""
    node = busybox_node
    build_node(str(node.path(GPU_NODE)), "single", stub_cache)
    node.path("/var/run/cdi").mkdir(parents=True)
    skipped = (f"root/{TOP}", SYSTEMCTL_LOG[1:])

    def listing() -> list[tuple[str, int]]:
        return sorted(
            (str(path), path.lstat().st_mode)
            for path in node.root.rglob("*")
            if not str(path.relative_to(node.root)).startswith(skipped)
        )

    before = listing()
    options = ("--runtime", "containerd", "--config", CONTAINERD, "--spec-service", "refresh", "--legacy-hook",
               "--podman-hook")  # fmt: skip
    unpack_and_install(node, tarball, *options)
    node.run("cdictk", "cdi", "generate", *ROOTS, "--output", SPEC)
    record = json.loads(node.path(f"{PREFIX}/.setup.json").read_text())
    assert record["units"] == ["cdictk-cdi-refresh.path", "cdictk-cdi-refresh.service"]
    assert listing() != before
    out = node.run("cdictk", "system", "uninstall")
    assert f"{SPEC}: removed (its hooks run {HOOK})" in out, out
    assert (
        "disable --now cdictk-cdi-refresh.path cdictk-cdi-refresh.service"
        in node.path(SYSTEMCTL_LOG).read_text()
    )
    node.path(f"/root/{tarball.name}").unlink()
    assert listing() == before
