"""The legacy prestart hook (`cdictk hook prestart`) run for real by runc and crun on the fake GPU node.

Each bundle asks for GPUs the way `docker run --gpus` does: ``NVIDIA_VISIBLE_DEVICES`` in the
environment and a prestart hook in config.json, here the ``cdictk-prestart`` launcher with a private
settings file naming the node's generated spec. runc has read config.json when the hook runs, so
everything the container shows was done by the hook, in the created container: device nodes made in
its /dev, driver files mounted read-only, links and the ld cache, device cgroup rules.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdictk.runtime.launchers import install_launchers, install_legacy_hook
from tests.conftest import node_with_spec
from tests.e2e.conftest import ENXIO, EPERM, IMAGE, Runtime, oci_config
from tests.e2e.daemons import (
    Dockerd,
    DockerError,
    dockerd_daemon,
    image_tar_fixture,  # noqa: F401  (pytest finds the image_tar fixture through this import)
)
from tests.e2e.test_runtimes import cdictk
from tests.fakenode.node import LIB_DIR, FakeNode

pytestmark = pytest.mark.root

V = "580.95.05"
LIBCUDA = f"{LIB_DIR}/libcuda.so.{V}"
INSIDE = (
    "ls -l /dev/nvidia0; cat /dev/nvidia0; cat /dev/nvidiactl; cat /dev/nvidia1; "
    f"grep ' {LIBCUDA} ' /proc/self/mountinfo; "
    "ldconfig -p | grep 'libcuda.so.1 '; "
    f"touch {LIBCUDA}; "
    f"grep '/firmware/nvidia/{V}/gsp_ga10x.bin ' /proc/self/mountinfo; "
    "/usr/bin/nvidia-smi; echo end"
)


@dataclass(frozen=True)
class Node:
    node: FakeNode
    spec_dir: Path
    hook: Path  # the cdictk-prestart launcher


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> Node:
    fake, spec_dir = node_with_spec(tmp_path_factory, stub_cache, "prestart")
    launchers = tmp_path_factory.mktemp("prestart-launchers")
    install_launchers(str(launchers))
    return Node(fake, spec_dir, launchers / "cdictk-prestart")


@dataclass(frozen=True)
class Bundles:
    """Makes bundles with the prestart hook for one test: its settings name the node's spec dir."""

    node: Node
    settings: Path
    tmp_path: Path

    def make(
        self,
        rootfs: Path,
        *,
        env: tuple[str, ...] = ("NVIDIA_VISIBLE_DEVICES=0",),
        script: str = INSIDE,
        edit: Callable[[dict[str, Any]], None] | None = None,
    ) -> Path:
        """A bundle for ``rootfs`` with the hook, ``env`` added, and /dev/nvidia1 present but denied."""
        bundle = self.tmp_path / "bundle"
        bundle.mkdir()
        config = oci_config(rootfs, ["sh", "-c", f"exec 2>&1; {script}"])
        config["root"]["readonly"] = False
        config["process"]["env"] += list(env)
        config["linux"]["devices"] = [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}]
        hook_env = [
            f"CDICTK_CONFIG={self.settings}",
            f"CDICTK_CACHE_DIR={os.environ['CDICTK_CACHE_DIR']}",
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        ]
        hook = {
            "path": str(self.node.hook),
            "args": ["nvidia-container-runtime-hook", "prestart"],
            "env": hook_env,
        }
        config["hooks"] = {"prestart": [hook]}
        if edit is not None:
            edit(config)
        (bundle / "config.json").write_text(json.dumps(config))
        return bundle


@pytest.fixture
def settings(tmp_path: Path, node: Node) -> Path:
    path = tmp_path / "cdictk-config.toml"
    path.write_text(f"[runtime]\nspec-dirs = [{json.dumps(str(node.spec_dir))}]\n")
    return path


@pytest.fixture
def bundles(node: Node, settings: Path, tmp_path: Path) -> Bundles:
    return Bundles(node, settings, tmp_path)


def assert_hook_failed(runtime: Runtime, result: subprocess.CompletedProcess[str], words: str) -> None:
    """The container did not start; runc shows the hook's one line (crun 1.8 only its exit status)."""
    assert result.returncode != 0, result.stdout
    if runtime.name == "runc":
        message = result.stderr.split("stderr: ", 1)[-1]
        assert message.startswith("cdictk hook prestart: ") and words in message, result.stderr
        assert message.count("\\n") <= 1, result.stderr  # one line, no traceback
    else:
        assert "cdictk-prestart` (exit code: 1)" in result.stderr, result.stderr


@pytest.fixture
def host_mounts() -> Iterator[None]:
    """No mount the hook makes may show up in the mount namespace runc runs in (the session's)."""
    before = Path("/proc/self/mountinfo").read_text().count(LIBCUDA)
    yield
    assert Path("/proc/self/mountinfo").read_text().count(LIBCUDA) == before


@pytest.mark.usefixtures("host_mounts")
def test_prestart_gives_the_container_gpu0(runtime: Runtime, debian_rootfs: Path, bundles: Bundles) -> None:
    bundle = bundles.make(debian_rootfs)
    config_before = (bundle / "config.json").read_bytes()
    _, result = runtime.run(bundle)
    out = result.stdout
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{out}"
    lines = out.splitlines()
    node0 = " ".join(next(line for line in lines if line.endswith("/dev/nvidia0")).split())
    assert node0.startswith("crw-rw-rw-") and "195, 0" in node0
    assert f"can't open '/dev/nvidia0': {ENXIO}" in out or f"/dev/nvidia0: {ENXIO}" in out, out
    assert f"/dev/nvidiactl: {ENXIO}" in out, out
    assert f"/dev/nvidia1: {EPERM}" in out, out
    # A library, and the firmware: /lib/firmware, through Debian's /lib -> usr/lib, in the rootfs.
    for path in (f" {LIBCUDA} ", f" /usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin "):
        mountinfo = next(line for line in lines if path in line)
        assert " ro," in mountinfo, mountinfo
    assert any("libcuda.so.1 " in line and "=>" in line for line in lines), out
    assert f"touch: cannot touch '{LIBCUDA}': Read-only file system" in out
    assert "fake" in lines  # the node's nvidia-smi ran from its read-only mount
    assert lines[-1] == "end"
    assert (bundle / "config.json").read_bytes() == config_before  # the hook never edits config.json


def test_a_container_that_asks_for_nothing_is_left_alone(
    runtime: Runtime, debian_rootfs: Path, bundles: Bundles
) -> None:
    bundle = bundles.make(debian_rootfs, env=(), script="ls /dev; echo end")
    _, result = runtime.run(bundle)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "nvidia0" not in result.stdout
    assert not (debian_rootfs / LIBCUDA.lstrip("/")).exists()


def test_an_unknown_device_stops_the_container_with_one_line(
    runtime: Runtime, debian_rootfs: Path, bundles: Bundles
) -> None:
    bundle = bundles.make(debian_rootfs, env=("NVIDIA_VISIBLE_DEVICES=7",))
    _, result = runtime.run(bundle)
    assert_hook_failed(runtime, result, "nvidia.com/gpu=7")
    assert "end" not in result.stdout
    assert not (debian_rootfs / LIBCUDA.lstrip("/")).exists()


def test_a_container_the_shim_prepared_is_left_alone(
    runtime: Runtime, debian_rootfs: Path, bundles: Bundles
) -> None:
    """Shim and hook both configured: the spec's NVIDIA_VISIBLE_DEVICES=void tells the hook it is done."""
    bundle = bundles.make(debian_rootfs, script=f"grep -c ' {LIBCUDA} ' /proc/self/mountinfo; echo end")
    injected = cdictk(
        "cdi",
        "inject",
        "--spec-dir",
        str(bundles.node.spec_dir),
        "-d",
        "nvidia.com/gpu=0",
        str(bundle / "config.json"),
    )
    assert injected.returncode == 0, injected.stderr
    _, result = runtime.run(bundle)
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.splitlines() == ["1", "end"]  # mounted once, by runc


REQUIREMENTS = [
    (("NVIDIA_REQUIRE_CUDA=cuda>=99.0",), False),
    (("NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_DISABLE_REQUIRE=true"), True),
    (("NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470,driver<471",), True),
    (("NVIDIA_REQUIRE_DRIVER=driver>=999",), False),
    (("CUDA_VERSION=99.1.0",), False),  # an image from before NVIDIA_REQUIRE_CUDA: cuda>=99.1
]


@pytest.mark.parametrize(("env", "starts"), REQUIREMENTS)
def test_requirements(
    runtime: Runtime, debian_rootfs: Path, bundles: Bundles, env: tuple[str, ...], starts: bool
) -> None:
    bundle = bundles.make(debian_rootfs, env=("NVIDIA_VISIBLE_DEVICES=0", *env), script="echo end")
    _, result = runtime.run(bundle)
    if starts:
        assert result.returncode == 0, result.stderr + result.stdout
        assert result.stdout.splitlines()[-1] == "end"
    else:
        assert_hook_failed(runtime, result, "requirement")
        assert not (debian_rootfs / LIBCUDA.lstrip("/")).exists()


@pytest.fixture(scope="module")
def eight(tmp_path_factory: pytest.TempPathFactory, stub_cache: str, node: Node) -> Node:
    """The fake eight-GPU node (GPU 0 in MIG mode, persistenced's socket, the MPS pipe directory)."""
    fake, spec_dir = node_with_spec(tmp_path_factory, stub_cache, "prestart-eight", "eight")
    return Node(fake, spec_dir, node.hook)


def test_a_mig_device_its_caps_and_the_ipc_sockets(
    runtime: Runtime, debian_rootfs: Path, eight: Node, tmp_path: Path
) -> None:
    settings = tmp_path / "eight.toml"
    settings.write_text(f"[runtime]\nspec-dirs = [{json.dumps(str(eight.spec_dir))}]\n")
    script = (
        "ls -l /dev/nvidia-caps /run/nvidia-persistenced/socket; cat /dev/nvidia0; cat /dev/nvidia1; "
        "grep -E ' /(run/nvidia-persistenced/socket|tmp/nvidia-mps) ' /proc/self/mountinfo; echo end"
    )
    env = ("NVIDIA_VISIBLE_DEVICES=0:0", "NVIDIA_REQUIRE_ARCH=arch>=9.0,brand=nvidia")
    bundle = Bundles(eight, settings, tmp_path).make(debian_rootfs, env=env, script=script)
    _, result = runtime.run(bundle)
    out = result.stdout
    assert result.returncode == 0, result.stderr + out
    lines = out.splitlines()
    assert sum(line.startswith("cr--r--r--") and "nvidia-cap" in line for line in lines) == 2, out
    assert any(line.startswith("s") and "/run/nvidia-persistenced/socket" in line for line in lines), out
    assert f"'/dev/nvidia0': {ENXIO}" in out or f"/dev/nvidia0: {ENXIO}" in out, out  # the MIG's GPU
    assert f"/dev/nvidia1: {EPERM}" in out, out
    mounts = [
        line for line in lines if " /run/nvidia-persistenced/socket " in line or " /tmp/nvidia-mps " in line
    ]
    assert len(mounts) == 2 and all(" ro," in line for line in mounts), out


# Escapes: an image that points its library directory, /etc or a device path at the host.


@dataclass(frozen=True)
class Hostile:
    """A busybox rootfs of the test's own, a host directory its links point at, and its bundles."""

    rootfs: Path
    sentinel: Path  # must stay empty
    bundles: Bundles


@pytest.fixture
def hostile(rootfs: Path, bundles: Bundles, tmp_path: Path) -> Iterator[Hostile]:
    copy = tmp_path / "rootfs"
    shutil.copytree(rootfs, copy, symlinks=True)
    sentinel = tmp_path / "host-sentinel"
    sentinel.mkdir()
    yield Hostile(copy, sentinel, bundles)
    assert sorted(os.listdir(sentinel)) == []


@pytest.mark.usefixtures("host_mounts")
@pytest.mark.parametrize("link", [LIB_DIR, "/etc", "/usr/bin"])
def test_image_links_to_the_host_stay_in_the_rootfs(runtime: Runtime, hostile: Hostile, link: str) -> None:
    target = hostile.rootfs / link.lstrip("/")
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(hostile.sentinel)
    bundle = hostile.bundles.make(hostile.rootfs, script="cat /dev/nvidia0; echo end")
    _, result = runtime.run(bundle)
    assert result.returncode == 0, result.stderr + result.stdout
    assert f"'/dev/nvidia0': {ENXIO}" in result.stdout, result.stdout
    # What the image's link pointed at was made inside the rootfs.
    assert (hostile.rootfs / str(hostile.sentinel).lstrip("/")).is_dir()


def test_a_symlink_where_a_driver_file_goes_is_refused(runtime: Runtime, hostile: Hostile) -> None:
    (hostile.rootfs / LIB_DIR.lstrip("/")).mkdir(parents=True)
    planted = hostile.sentinel / "planted"
    (hostile.rootfs / LIBCUDA.lstrip("/")).symlink_to(planted)
    _, result = runtime.run(hostile.bundles.make(hostile.rootfs, script="echo end"))
    assert_hook_failed(runtime, result, f"mount {LIBCUDA}: the image has a symlink there")
    assert not planted.exists()


def test_image_device_nodes_are_replaced_not_followed(runtime: Runtime, hostile: Hostile) -> None:
    """Without a /dev tmpfs the image's /dev is used: its nvidia0 link to a host file is replaced."""
    victim = hostile.sentinel.parent / "victim"
    victim.write_text("keep\n")
    dev = hostile.rootfs / "dev"
    dev.mkdir(exist_ok=True)
    (dev / "nvidia0").symlink_to(victim)

    def no_dev_tmpfs(config: dict[str, Any]) -> None:
        config["mounts"] = [m for m in config["mounts"] if not m["destination"].startswith("/dev")]
        config["linux"]["devices"] = []

    bundle = hostile.bundles.make(hostile.rootfs, script="ls -l /dev/nvidia0; echo end", edit=no_dev_tmpfs)
    _, result = runtime.run(bundle)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "195, 0" in " ".join(result.stdout.split()), result.stdout
    assert victim.read_text() == "keep\n"


# Docker: `docker run --gpus` finds nvidia-container-runtime-hook on dockerd's PATH.

DOCKER_INSIDE = (
    "ls /dev; cat /dev/nvidia0; cat /dev/nvidia1; "
    f"grep ' {LIBCUDA} ' /proc/self/mountinfo; /usr/bin/nvidia-smi; echo end"
)


def gpus(*ids: str, count: int = 0, capabilities: tuple[str, ...] = ("gpu",)) -> dict[str, Any]:
    """The HostConfig `docker run --gpus device=0,1` (ids) or `--gpus all` (count=-1) sends."""
    request: dict[str, Any] = {"Driver": "", "Capabilities": [list(capabilities)]}
    if ids:
        request["DeviceIDs"] = list(ids)
    else:
        request["Count"] = count
    return {"DeviceRequests": [request]}


@pytest.fixture
def docker_with_hook(image_tar: Path, node: Node, settings: Path, tmp_path: Path) -> Iterator[Dockerd]:
    bindir = tmp_path / "bin"
    installed = install_legacy_hook(str(bindir))
    assert installed == str(bindir / "nvidia-container-runtime-hook")
    env = {"CDICTK_CONFIG": str(settings), "CDICTK_CACHE_DIR": os.environ["CDICTK_CACHE_DIR"]}
    with dockerd_daemon(env=env, path_dirs=[bindir]) as docker:
        docker.load_image(image_tar)
        yield docker


def test_docker_run_gpus(docker_with_hook: Dockerd) -> None:
    docker = docker_with_hook
    one = docker.run(IMAGE, ["sh", "-c", f"exec 2>&1; {DOCKER_INSIDE}"], host_config=gpus("0"))
    assert one.returncode == 0, one.stdout + one.stderr
    out = one.stdout
    assert f"'/dev/nvidia0': {ENXIO}" in out, out
    assert "nvidia1" not in out.split("cat:")[0]  # `ls /dev`: only the GPU asked for
    assert " ro," in next(line for line in out.splitlines() if f" {LIBCUDA} " in line)
    assert "fake" in out.splitlines()
    every = docker.run(
        IMAGE, ["sh", "-c", "exec 2>&1; cat /dev/nvidia0; echo end"], host_config=gpus(count=-1)
    )
    assert every.returncode == 0, every.stdout + every.stderr
    assert f"'/dev/nvidia0': {ENXIO}" in every.stdout, every.stdout
    plain = docker.run(IMAGE, ["sh", "-c", "ls /dev; echo end"])
    assert plain.returncode == 0 and "nvidia0" not in plain.stdout, plain.stdout
    # --gpus 'device=0,"capabilities=utility"': Docker sets NVIDIA_DRIVER_CAPABILITIES=utility.
    utility = docker.run(
        IMAGE, ["sh", "-c", DOCKER_INSIDE], host_config=gpus("0", capabilities=("gpu", "utility"))
    )
    assert utility.returncode == 0, utility.stdout + utility.stderr
    assert "fake" in utility.stdout.splitlines()  # nvidia-smi: utility
    assert f" {LIBCUDA} " not in utility.stdout  # libcuda: compute, not asked for


def test_docker_run_gpus_with_an_unmet_requirement_fails(docker_with_hook: Dockerd) -> None:
    with pytest.raises(DockerError, match="cdictk hook prestart: requirement"):
        docker_with_hook.run(IMAGE, ["true"], env=["NVIDIA_REQUIRE_CUDA=cuda>=99.0"], host_config=gpus("0"))


def test_the_hook_at_a_later_stage_refuses_a_started_container(runtime: Runtime, hostile: Hostile) -> None:
    """Listed as a poststart hook, it would join a container that has pivoted into its image, where
    the spec hook's program path is the image's: the image plants one there, which must never run."""
    spec = (hostile.bundles.node.spec_dir / "nvidia.yaml").read_text()
    program = next(
        line.split("path:", 1)[1].strip()
        for line in spec.splitlines()
        if "path: /" in line and "python" in line
    )
    planted = hostile.rootfs / program.lstrip("/")
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text("#!/bin/sh\ntouch /OWNED\n")
    planted.chmod(0o755)
    (hostile.rootfs / str(hostile.rootfs).lstrip("/")).mkdir(parents=True)  # its own rootfs path, too

    def at_poststart(config: dict[str, Any]) -> None:
        config["hooks"] = {"poststart": config["hooks"]["prestart"]}

    _, result = runtime.run(
        hostile.bundles.make(hostile.rootfs, script="sleep 1; echo end", edit=at_poststart)
    )
    assert not (hostile.rootfs / "OWNED").exists()
    if runtime.name == "runc":
        assert "not a container being created" in result.stderr, result.stderr


def test_cgroup_v2_runcs_own_device_program_gets_the_gpu(
    debian_rootfs: Path, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """runc on the unified hierarchy: this host mounts cgroup v1 controllers, so runc runs in a mount
    namespace of its own where /sys/fs/cgroup is cgroup2 only, and attaches its device program there.
    The hook, run by that runc, must extend runc's real program: nvidia0 allowed, nvidia1 still not."""
    runc = shutil.which("runc")
    assert runc is not None
    wrapper = tmp_path_factory.mktemp("runc-v2") / "runc"
    wrapper.write_text(
        "#!/bin/sh\nexec unshare -m sh -c "
        '\'mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && exec "$0" "$@"\' '
        f'{runc} "$@"\n'
    )
    wrapper.chmod(0o755)
    log = bundles.tmp_path / "hook.log"

    def with_log(config: dict[str, Any]) -> None:
        config["hooks"]["prestart"][0]["env"] += [f"CDICTK_HOOK_LOG={log}", "CDICTK_DEBUG=1"]

    script = "cat /dev/nvidia0; cat /dev/nvidia1; grep '^0::' /proc/self/cgroup; echo end"
    bundle = bundles.make(debian_rootfs, script=script, edit=with_log)
    _, result = Runtime("runc", str(wrapper), tmp_path_factory.mktemp("runc-v2-state")).run(bundle)
    out = result.stdout
    assert result.returncode == 0, result.stderr + out
    assert f"/dev/nvidia0: {ENXIO}" in out and f"/dev/nvidia1: {EPERM}" in out, out
    assert "0::/" in out  # the container's cgroup is on the unified hierarchy
    assert "cgroup v2 " in log.read_text() and " replaced by " in log.read_text(), log.read_text()
