"""cdictk's node runtime on nodes without a usable Python: built as the image builds it, installed, and
the hooks of a spec generated there run through it.

The runtime is built once per session (tests/e2e/runtimebuild.py: in a chroot of tests/fetch-rootfs.sh's
``bookworm-python`` root). Each node is a root made the root of a private mount namespace:

- busybox only (no glibc, no Python: Bottlerocket or Talos give cdictk no more to run on). The
  runtime installs itself there with its own ``cdictk``, as the node tarball's install does, and
  generates and injects the spec there too. runc cannot run without a glibc, so the container's mounts
  are made and its createContainer hook is run as runc runs it: the spec's path, arguments and
  environment, the OCI state on stdin;
- Debian 12 and (slow) Ubuntu 22.04 minbase (glibc 2.36 and 2.35, no Python): installed from outside
  the node's root as the DaemonSet's init container installs it (the prefix mounted elsewhere, the
  node's / at another path), and containers run by runc in the node's root through the spec's hook,
  through the shim's front (``PREFIX/bin/cdictk-runtime``) and through the legacy prestart hook.

Each container's image is Debian minbase: its ld cache must hold the fake driver's libraries after.
A last test swaps versions N -> N+1 -> N ... while hooks run through ``current``: none may fail.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdictk.bundlelayout import ENTRIES
from cdictk.noderuntime import manifest
from cdictk.noderuntime.install import Target, install
from tests.conftest import require_node_tools
from tests.e2e.conftest import (
    DEBIAN_ROOTFS,
    build_busybox_rootfs,
    busybox_problem,
    fetch_minbase,
    oci_config,
    overlay,
    require_root,
    require_tool,
)
from tests.e2e.runtimebuild import build_runtime, node_run, run, variant
from tests.fakenode.node import LIB_DIR, build_node

pytestmark = pytest.mark.root

PREFIX = "/opt/cdictk"
HOOK = f"{PREFIX}/current/bin/cdictk-hook"
GPU_NODE = "/gpunode"  # the fake GPU node's files, in the node's root
CONTAINER = "/run/c1"  # the container's bundle, in the node's root
STAGED = "/var/lib/cdictk-runtime"  # where a node tarball would leave the runtime before its install
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
STATE = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": CONTAINER})


@pytest.fixture(scope="session")
def node_runtimes(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The runtime, built twice from the same image and venv into directories of other names (about
    a minute: wheels, a venv in the image, the builds and their self-tests)."""
    require_root()
    require_tool("gcc")
    require_tool("unshare")
    found = fetch_minbase("bookworm-python")["bookworm-python"]
    if not isinstance(found, Path):
        pytest.skip(found)
    work = tmp_path_factory.mktemp("node-runtime")
    return build_runtime(found, work / "build", [work / "runtime", work / "runtime-again"])


@pytest.fixture
def node_runtime(node_runtimes: list[Path]) -> Path:
    return node_runtimes[0]


def test_the_same_inputs_build_the_same_runtime(node_runtimes: list[Path]) -> None:
    """Byte for byte: every file's content and mode (the manifest lists them) and so the ID; the
    bytecode unchecked-hash (no mtime in it, nothing to stat on a start); under the size aimed at."""
    first, again = node_runtimes
    assert (first / "MANIFEST").read_bytes() == (again / "MANIFEST").read_bytes()
    assert manifest.mismatch(str(again), manifest.read(str(first))[1]) is None
    entries = manifest.read(str(first))[1]
    pycs = [entry.path for entry in entries if entry.path.endswith(".pyc")]
    assert len(pycs) > 500
    assert all((first / path).read_bytes()[4:8] == b"\x01\x00\x00\x00" for path in pycs)
    launchers = sorted([*ENTRIES, "python3"])  # one file: the first name, and hard links of it
    assert [e.path for e in entries if e.kind == "h"] == [f"bin/{name}" for name in launchers[1:]]
    size = sum((first / e.path).stat().st_size for e in entries if e.kind == "f")
    assert size < 40 << 20, f"{size / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class Node:
    root: Path

    def path(self, inside: str) -> Path:
        return self.root / inside.lstrip("/")

    def run(
        self,
        *argv: str,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        binds: tuple[tuple[str, str], ...] = (),
    ) -> str:
        done = node_run(self.root, list(argv), env=env, stdin=stdin, binds=binds)
        assert done.returncode == 0, (
            f"{shlex.join(argv)}: status {done.returncode}: {done.stderr}{done.stdout}"
        )
        return done.stdout + done.stderr


def new_busybox_node(root: Path) -> Node:
    """A busybox-only node root at ``root`` (skipped where this machine's busybox cannot make one)."""
    require_root()
    problem = busybox_problem()
    if problem is not None:
        pytest.skip(problem)
    build_busybox_rootfs(root)
    return Node(root)


@pytest.fixture
def busybox_node(tmp_path: Path) -> Node:
    return new_busybox_node(tmp_path / "node")


@pytest.fixture(params=["bookworm", pytest.param("jammy", marks=pytest.mark.slow)])
def glibc_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    """A fresh overlay of a minbase root (no Python), with runc (this machine's: its glibc is older)."""
    suite = request.param
    found = fetch_minbase(suite)[suite]
    if not isinstance(found, Path):
        pytest.skip(found)
    assert not (found / "usr/bin/python3").exists()
    runc = require_tool("runc")
    with overlay(found, tmp_path / "node") as root:
        run(["cp", runc, str(root / "usr/local/sbin/runc")])
        yield Node(root)


def install_staged(node: Node, runtime: Path) -> str:
    """The runtime unpacked in the node's root, as a node tarball leaves it, and installed by its own
    ``cdictk`` there; the install's output."""
    node.path(STAGED).parent.mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", str(runtime), str(node.path(STAGED))])  # -a: the launcher's hard links stay
    return node.run(f"{STAGED}/bin/cdictk", "system", "install-runtime", "--bundle", STAGED)


def install_from_outside(node: Node, runtime: Path) -> str:
    """Installed by this machine's cdictk into the node's prefix, as the DaemonSet's init container
    does: it sees the node's prefix and root at other paths."""
    done = subprocess.run(
        [
            sys.executable, "-m", "cdictk", "system", "install-runtime", "--bundle", str(runtime), "--prefix", PREFIX,
            "--target", str(node.path(PREFIX)), "--host-root", str(node.root),
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def generate(node: Node, stub_cache: str) -> str:
    """The fake one-GPU node under the node's root and its spec, generated and validated there by the
    installed runtime, whose default hook is the stable path; the spec's text."""
    require_node_tools()
    build_node(str(node.path(GPU_NODE)), "single", stub_cache)
    roots = ["--driver-root", GPU_NODE, "--proc-root", f"{GPU_NODE}/proc", "--sys-root", f"{GPU_NODE}/sys"]
    node.run(f"{PREFIX}/bin/cdictk", "cdi", "generate", *roots, "--output", "/etc/cdi/nvidia.yaml")
    node.run(f"{PREFIX}/bin/cdictk", "cdi", "validate", "/etc/cdi/nvidia.yaml")
    return node.path("/etc/cdi/nvidia.yaml").read_text()


def write_bundle(
    node: Node, args: list[str], env: list[str] | None = None, annotations: dict[str, str] | None = None
) -> Path:
    """The container's bundle at CONTAINER in the node's root, its rootfs at CONTAINER/rootfs."""
    bundle = node.path(CONTAINER)
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    config = oci_config(Path(f"{CONTAINER}/rootfs"), args)
    config["root"]["readonly"] = False
    config["process"]["env"] += env or []
    if annotations:
        config["annotations"] = annotations
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def config_of(node: Node) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(node.path(f"{CONTAINER}/config.json").read_text())
    return config


def check_ld_cache(listing: str) -> None:
    for name in DRIVER_LIBRARIES:
        assert f"{name} (libc6,x86-64) => {LIB_DIR}/{name}" in listing, listing


def container_mounts(node: Node, rootfs: Path) -> tuple[tuple[str, str], ...]:
    """The container's rootfs and every bind mount of its config.json, as runc makes them before the
    createContainer hooks run (their mount points made in the image)."""
    binds = [(str(rootfs), f"{CONTAINER}/rootfs")]
    for mount in config_of(node)["mounts"]:
        if mount.get("type") != "bind" and not {"bind", "rbind"} & set(mount.get("options", [])):
            continue
        source = node.path(mount["source"])
        point = rootfs / mount["destination"].lstrip("/")
        point.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            point.mkdir(exist_ok=True)
        elif not point.exists():
            point.touch()
        binds.append((str(source), f"{CONTAINER}/rootfs{mount['destination']}"))
    return tuple(binds)


def hook_command(node: Node) -> tuple[list[str], dict[str, str]]:
    """The one createContainer hook of the container's config.json: its argv as runc runs it, its env."""
    hooks = config_of(node)["hooks"]["createContainer"]
    assert len(hooks) == 1, hooks
    hook = hooks[0]
    assert hook["path"] == HOOK and hook["args"][:2] == ["cdictk-hook", "batch"], hook
    return [hook["path"], *hook["args"][1:]], dict(item.split("=", 1) for item in hook["env"])


def gpu_container_hook_runs(node: Node, cdictk: str, image: Path, *inject: str) -> None:
    """A container given GPU 0 by ``cdictk cdi inject`` (the node's ``cdictk`` at ``cdictk``, ``inject``
    its own flags), its createContainer hook run as runc runs it, in an overlay of the Debian image
    under ``image``: the image's ld cache must then hold the driver's libraries."""
    write_bundle(node, ["true"])
    node.run(cdictk, "cdi", "inject", *inject, "-d", "nvidia.com/gpu=0", f"{CONTAINER}/config.json")
    argv, env = hook_command(node)
    with overlay(DEBIAN_ROOTFS, image) as rootfs:
        node.run(*argv, env=env, stdin=STATE, binds=container_mounts(node, rootfs))
        check_ld_cache(run(["chroot", str(rootfs), "/sbin/ldconfig", "-p"]).stdout)


def test_a_busybox_node_runs_the_spec_hook_through_the_runtime(
    node_runtime: Path, busybox_node: Node, stub_cache: str, tmp_path: Path
) -> None:
    node = busybox_node
    out = install_staged(node, node_runtime)
    assert "installed (copied)" in out, out
    assert node.path(f"{PREFIX}/current").readlink().parts[0] == "versions"
    assert node.path(f"{PREFIX}/bin/cdictk").readlink() == Path("../current/bin/cdictk")
    # busybox has /bin/sh: the shim's front, which execs the runtime's launcher for what needs Python
    front = node.path(f"{PREFIX}/bin/cdictk-runtime").read_text()
    assert front.startswith("#!/bin/sh\n") and f"python='{PREFIX}/current/bin/cdictk-runtime'" in front
    assert "usage: cdictk-runtime" in node.run(f"{PREFIX}/bin/cdictk-runtime", "--help")
    assert "prestart" in node.run(f"{PREFIX}/bin/nvidia-container-runtime-hook", "--help")

    spec = generate(node, stub_cache)
    assert f"path: {HOOK}\n" in spec
    gpu_container_hook_runs(node, f"{PREFIX}/bin/cdictk", tmp_path / "image", "--spec-dir", "/etc/cdi")


def test_a_glibc_node_runs_containers_through_the_runtime(
    node_runtime: Path, glibc_node: Node, stub_cache: str, tmp_path: Path
) -> None:
    node = glibc_node
    assert "installed (copied)" in install_from_outside(node, node_runtime)
    generate(node, stub_cache)
    runc = ["runc", "--root", "/run/runc", "run", "--bundle", CONTAINER, "c1"]
    shim = [f"{PREFIX}/bin/cdictk-runtime", *runc[1:]]

    # The spec's hook, through the runtime, run by runc.
    write_bundle(node, ["/sbin/ldconfig", "-p"])
    node.run(f"{PREFIX}/bin/cdictk", "cdi", "inject", "--spec-dir", "/etc/cdi", "-d", "nvidia.com/gpu=0",
             f"{CONTAINER}/config.json")  # fmt: skip
    hook_command(node)
    with overlay(DEBIAN_ROOTFS, tmp_path / "image1") as rootfs:
        check_ld_cache(node.run(*runc, binds=((str(rootfs), f"{CONTAINER}/rootfs"),)))

    # The shim, through its front and the runtime, asked by an annotation (as a device plugin asks).
    write_bundle(node, ["/sbin/ldconfig", "-p"], annotations={"cdi.k8s.io/e2e": "nvidia.com/gpu=0"})
    with overlay(DEBIAN_ROOTFS, tmp_path / "image2") as rootfs:
        check_ld_cache(node.run(*shim, binds=((str(rootfs), f"{CONTAINER}/rootfs"),)))

    # The legacy prestart hook, through the runtime, as Docker's --gpus has runc run it.
    write_bundle(node, ["/sbin/ldconfig", "-p"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    config = config_of(node)
    legacy = f"{PREFIX}/bin/nvidia-container-runtime-hook"
    config["hooks"] = {
        "prestart": [{"path": legacy, "args": [legacy, "prestart"], "env": ["PATH=/usr/bin:/bin"]}]
    }
    node.path(f"{CONTAINER}/config.json").write_text(json.dumps(config))
    with overlay(DEBIAN_ROOTFS, tmp_path / "image3") as rootfs:
        check_ld_cache(node.run(*runc, binds=((str(rootfs), f"{CONTAINER}/rootfs"),)))


def test_containers_starting_while_versions_swap_never_fail(
    node_runtime: Path, busybox_node: Node, stub_cache: str, tmp_path: Path
) -> None:
    """The hook runs in a loop through PREFIX/current while this process installs N+1, N, N+1, N, ...
    into the node's prefix (each a copy or an intact version kept, its self-test, the swap)."""
    node = busybox_node
    install_staged(node, node_runtime)
    other = variant(node_runtime, tmp_path / "runtime-n1", "N+1")
    generate(node, stub_cache)
    write_bundle(node, ["true"])
    node.run(f"{PREFIX}/bin/cdictk", "cdi", "inject", "--spec-dir", "/etc/cdi", "-d", "nvidia.com/gpu=0",
             f"{CONTAINER}/config.json")  # fmt: skip
    argv, env = hook_command(node)
    variables = " ".join(shlex.quote(f"{key}={value}") for key, value in env.items())
    node.path("/state.json").write_text(STATE)
    node.path("/loop.sh").write_text(
        "runs=0 failed=0\n"
        "while ! [ -e /stop ]; do\n"
        f"    if ! env -i {variables} {shlex.join(argv)} </state.json >/dev/null 2>/hook.err; then\n"
        "        failed=$((failed + 1)); cat /hook.err\n"
        "    fi\n"
        "    runs=$((runs + 1))\n"
        "done\n"
        'echo "runs=$runs failed=$failed"\n'
    )
    target = Target(PREFIX, str(node.path(PREFIX)), str(node.root))
    installed: list[str] = []

    def swap() -> None:
        try:
            for bundle in (other, node_runtime) * 3:
                installed.append(install(str(bundle), target).runtime_id)
        finally:
            node.path("/stop").touch()

    with overlay(DEBIAN_ROOTFS, tmp_path / "image") as rootfs:
        swapper = threading.Thread(target=swap)
        swapper.start()
        out = node.run("/bin/sh", "/loop.sh", binds=container_mounts(node, rootfs))
        swapper.join()
    assert len(installed) == 6 and len(set(installed)) == 2, installed
    summary = out.strip().splitlines()[-1]
    runs, failed = (int(word.split("=")[1]) for word in summary.split())
    assert failed == 0, out
    assert runs > len(installed), out  # hooks did run across the swaps
    versions = sorted(path.name for path in node.path(f"{PREFIX}/versions").iterdir())
    assert versions == sorted(set(installed))  # the current one and the one before it, nothing else


def test_uninstall_leaves_the_node_as_it_was(node_runtime: Path, busybox_node: Node) -> None:
    node = busybox_node
    node.path(STAGED).parent.mkdir(parents=True)

    def listing() -> list[tuple[str, int]]:
        return sorted(
            (str(path), path.lstat().st_mode) for path in node.root.rglob("*") if STAGED[1:] not in str(path)
        )

    before = listing()
    install_staged(node, node_runtime)
    assert listing() != before
    out = node.run(f"{STAGED}/bin/cdictk", "system", "uninstall-runtime")
    assert "node runtime removed" in out
    assert listing() == before
