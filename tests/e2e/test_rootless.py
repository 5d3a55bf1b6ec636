"""Rootless podman (crun) with the spec ``cdictk cdi generate`` writes, next to the same run as root.

A user made for the session, with subordinate ids, runs ``podman run --device cdictk.test/gpu=0`` on
the Debian image: the GPU's node is there (ENXIO, no driver behind it) and the image's ld cache lists
the driver's libraries, which the hook wrote as the user, inside a user namespace where root's files
show as the overflow uid. Judged by real root's rule, the host's ldconfig would be refused ("owned by
uid 65534, not root") and the container would not start.

What a rootless engine needs from the node: podman 4.3 reads specs only from /etc/cdi and
/var/run/cdi (the spec goes to /var/run/cdi under a test-only vendor and is removed after); crun gives
a rootless container a device by bind-mounting the node at its own path on the host, so the fake
node's nodes are made at /dev for the test (only those missing, removed after); the hook runs as the
user, so the spec names a Python and a copy of cdictk the user can read (the checkout and its
virtual environment may sit under root's 0700 home).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import cdictk
from tests.e2e.conftest import ENXIO, LoginUser, Podman, require_tool
from tests.fakenode.node import FakeNode, build_node

pytestmark = pytest.mark.root

VENDOR, CLASS = "cdictk.test", "gpu"
KIND = f"{VENDOR}/{CLASS}"
SPEC_DIR = Path("/var/run/cdi")
DEBIAN = "localhost/cdictk-e2e-debian-rootless:1"
SYSTEM_PYTHON = "/usr/bin/python3"
INSIDE = (
    "exec 2>&1; ls -l /dev/nvidia0; cat /dev/nvidia0; "
    "ldconfig -p | grep -E 'libcuda.so.1 |libnvidia-ml.so.1 '; echo end"
)


@dataclass(frozen=True)
class RootlessPodman:
    user: LoginUser
    base: Path

    def __call__(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            "XDG_RUNTIME_DIR": str(self.base / "run"),
            "CONTAINERS_CONF": str(self.base / "containers.conf"),
        }
        command = [
            "podman",
            "--root", str(self.base / "storage"),
            "--runroot", str(self.base / "run" / "c"),  # podman: at most 50 characters
            "--storage-driver", "vfs",
            "--cgroup-manager", "cgroupfs",
            "--events-backend", "file",
            *args,
        ]  # fmt: skip
        return self.user.run(*command, env=env, input=stdin, timeout=300)


def rootless_problem() -> str | None:
    """What this machine lacks for a rootless podman container, named; None when nothing is."""
    for tool in ("newuidmap", "newgidmap"):
        path = shutil.which(tool)
        if path is None:
            return f"{tool} is missing (the uidmap package; tests/setup-host.sh installs it)"
        if not os.stat(path).st_mode & (stat.S_ISUID | stat.S_ISGID) and not os.getxattr(
            path, "security.capability", follow_symlinks=True
        ):
            return f"{path} is neither set-uid nor given file capabilities"
    with contextlib.suppress(OSError):
        if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
            return "user namespaces are off (user.max_user_namespaces = 0)"
        if Path("/proc/sys/kernel/unprivileged_userns_clone").read_text().strip() == "0":
            return "unprivileged user namespaces are off (kernel.unprivileged_userns_clone = 0)"
    if not os.path.exists(SYSTEM_PYTHON):
        return f"{SYSTEM_PYTHON} is missing: the hook needs a Python the user may run"
    return None


@pytest.fixture(scope="module")
def open_node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> Iterator[tuple[FakeNode, Path]]:
    """The fake one-GPU node and a copy of cdictk, where the user can read both; removed after."""
    base = Path(tempfile.mkdtemp(prefix="cdictk-rl-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        node = build_node(str(base / "node"), "single", stub_cache)
        package = Path(cdictk.__file__).resolve().parent
        shutil.copytree(package, base / "pkg" / "cdictk", ignore=shutil.ignore_patterns("__pycache__"))
        yield node, base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def rootless_spec(open_node: tuple[FakeNode, Path]) -> Iterator[Path]:
    """The node's spec as root writes it (the hook: the system's Python on the copy), in /var/run/cdi."""
    node, base = open_node
    SPEC_DIR.mkdir(parents=True, exist_ok=True)
    output = SPEC_DIR / f"cdictk-e2e-rootless-{uuid.uuid4().hex[:12]}.json"
    generate = [
        sys.executable, "-m", "cdictk", "cdi", "generate", *node.cli_args(),
        "--vendor", VENDOR, "--class", CLASS, "--hook-path", SYSTEM_PYTHON,
        "--cdi-version", "0.5.0", "--format", "json", "--output", str(output),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(base / "pkg")}  # entry_file() is the copy's
    try:
        made = subprocess.run(generate, capture_output=True, text=True, env=env, cwd=base, check=False)
        assert made.returncode == 0, made.stderr
        assert str(base / "pkg" / "cdictk" / "startpath" / "hooks" / "__main__.py") in output.read_text()
        yield output
    finally:
        output.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def host_nodes(rootless_spec: Path, open_node: tuple[FakeNode, Path]) -> Iterator[None]:
    """The spec's device nodes of GPU 0 and the common edits at their own paths under /dev, where
    crun bind-mounts a rootless container's nodes from; only those missing, removed after."""
    spec = json.loads(rootless_spec.read_text())
    nodes = [*spec["containerEdits"].get("deviceNodes", [])]
    nodes += next(d for d in spec["devices"] if d["name"] == "0")["containerEdits"].get("deviceNodes", [])
    made: list[Path] = []
    dirs: list[Path] = []
    try:
        for entry in nodes:
            path = Path(entry["path"])
            if os.path.lexists(path):
                continue
            source = os.stat(entry.get("hostPath") or entry["path"])
            for parent in reversed(path.parents):
                if not parent.exists():
                    parent.mkdir(mode=0o755)
                    dirs.append(parent)
            os.mknod(path, stat.S_IFCHR | 0o666, source.st_rdev)
            os.chmod(path, stat.S_IMODE(source.st_mode))
            made.append(path)
        yield
    finally:
        for path in made:
            path.unlink()
        for directory in reversed(dirs):
            directory.rmdir()


@pytest.fixture(scope="module")
def rootless(
    login_user: LoginUser, open_node: tuple[FakeNode, Path], debian_rootfs_cache: Path
) -> Iterator[RootlessPodman]:
    problem = rootless_problem()
    if problem is not None:
        pytest.skip(f"rootless podman cannot run here: {problem}")
    require_tool("podman")
    require_tool("crun")
    if not login_user.subordinate_ids():
        pytest.skip(f"{login_user.name} has no subordinate ids (/etc/subuid, /etc/subgid)")
    _, node_base = open_node
    base = node_base / "podman"
    base.mkdir()
    (base / "run").mkdir(mode=0o700)
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    (base / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]\n'
        '[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\nruntime = "crun"\n'
    )
    for path in (base, base / "run", base / "containers.conf"):
        os.chown(path, login_user.uid, login_user.gid)
    podman = RootlessPodman(login_user, base)
    archive = subprocess.run(
        ["tar", "-C", str(debian_rootfs_cache), "-c", "."], capture_output=True, check=True
    )
    imported = podman("import", "-q", "-", DEBIAN, stdin=archive.stdout)
    assert imported.returncode == 0, imported.stderr
    try:
        yield podman
    finally:
        podman("unshare", "rm", "-rf", str(base / "storage"))


def check_gpu_and_ld_cache(out: str) -> None:
    assert f"cat: /dev/nvidia0: {ENXIO}" in out, out
    assert "libcuda.so.1 (" in out and "libnvidia-ml.so.1 (" in out, out
    assert out.rstrip().endswith("end"), out


@pytest.mark.usefixtures("host_nodes")
def test_rootless_podman_gets_its_gpu_and_the_ld_cache(rootless: RootlessPodman) -> None:
    result = rootless("run", "--rm", "--network", "none", "--device", f"{KIND}=0", DEBIAN, "sh", "-c", INSIDE)
    assert result.returncode == 0, result.stderr + result.stdout
    check_gpu_and_ld_cache(result.stdout)


@pytest.mark.usefixtures("host_nodes", "rootless_spec")
def test_the_same_run_as_root(podman: Podman, debian_rootfs_cache: Path) -> None:
    archive = subprocess.run(
        ["tar", "-C", str(debian_rootfs_cache), "-c", "."], capture_output=True, check=True
    )
    imported = podman("import", "-q", "-", DEBIAN, stdin=archive.stdout)
    assert imported.returncode == 0, imported.stderr.decode()
    result = podman("run", "--rm", "--network", "none", "--device", f"{KIND}=0", DEBIAN, "sh", "-c", INSIDE)
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode() + out
    check_gpu_and_ld_cache(out)
