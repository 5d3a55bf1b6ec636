"""A fake GPU host for end-to-end tests with real runtimes.

Device nodes made with mknod (195:N, the NVIDIA major) with no driver behind them: inside a container
that the device cgroup allows, open() fails with ENXIO; when the cgroup denies the node, with EPERM.
That difference is the oracle the tests assert on. The rootfs is Debian's static busybox; the hook
tests also use a Debian minbase rootfs (``debian_rootfs``: an overlay of tests/fetch-rootfs.sh's cache).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import resource
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdictk.cdi.dump import dump_yaml
from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from cdictk.cdi.version import minimum_version
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.hostbinary import check_static_elf
from nodeimage import makeimage
from nodeimage.ocilayout import read_image
from realnode.containers import oci_config as realnode_oci_config

HERE = Path(__file__).resolve().parent
BUSYBOX = "/bin/busybox"
RECORD_HOOK = HERE / "record_hook.py"
ENXIO = "No such device or address"
EPERM = "Operation not permitted"


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("end-to-end tests need root: mknod, runc, crun and podman (run: sudo make test)")


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (tests/setup-host.sh installs it)")
    return path


@dataclass(frozen=True)
class FakeGpuHost:
    root: Path
    nvidia0: Path
    nvidia1: Path
    nvidiactl: Path
    host_file: Path
    hook_log: Path


@pytest.fixture(scope="session")
def fake_gpu_host(tmp_path_factory: pytest.TempPathFactory) -> FakeGpuHost:
    require_root()
    root = tmp_path_factory.mktemp("fake-gpu-host")
    (root / "dev").mkdir()
    nodes = {}
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        path = root / "dev" / name
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        os.chmod(path, 0o666)  # mknod's mode is filtered by the umask
        nodes[name] = path
    (root / "hostfiles").mkdir()
    host_file = root / "hostfiles" / "file.txt"
    host_file.write_text("hello from the host\n")
    hook_log = root / "hooklog"
    hook_log.mkdir()
    return FakeGpuHost(root, nodes["nvidia0"], nodes["nvidia1"], nodes["nvidiactl"], host_file, hook_log)


def busybox_problem() -> str | None:
    """Why ``BUSYBOX`` cannot make a rootfs (missing, or dynamically linked), or None."""
    try:
        fd = os.open(BUSYBOX, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        return f"{BUSYBOX}: {error.strerror}; install busybox-static (tests/setup-host.sh does)"
    try:
        check_static_elf(fd, BUSYBOX)
    except HookError as error:
        return f"{error}; install busybox-static"
    finally:
        os.close(fd)
    return None


def build_busybox_rootfs(root: Path) -> None:
    """The static busybox and one link per applet under ``root``, with root's passwd and group."""
    for sub in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "tmp", "root", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list-full"], capture_output=True, text=True, check=True).stdout
    for applet in applets.split():
        link = root / applet
        if applet != "bin/busybox" and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")


@pytest.fixture(scope="session")
def busybox_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A busybox rootfs, with a ``/mounted/file`` for mount tests, built once: never run a container
    on it (runc makes the spec's mount points in a rootfs, which would leak into the next test)."""
    require_root()
    problem = busybox_problem()
    if problem is not None:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("rootfs")
    build_busybox_rootfs(root)
    (root / "mounted").mkdir()
    (root / "mounted" / "file").touch()
    return root


@pytest.fixture
def rootfs(busybox_image: Path, tmp_path: Path) -> Path:
    """This test's own copy of the busybox rootfs (about 20 ms): what its containers leave in it
    (mount points, links, an ld cache) stays with the test."""
    copy = tmp_path / "busybox-rootfs"
    shutil.copytree(busybox_image, copy, symlinks=True)
    return copy


def e2e_spec(host: FakeGpuHost, kind: str) -> Spec:
    """Two GPUs with host paths outside /dev, and common edits of every kind runtimes apply."""
    hook = Hook(
        hook_name="createContainer",
        path=sys.executable,
        args=[sys.executable, "-I", str(RECORD_HOOK), str(host.hook_log)],
        env=["CDICTK_E2E=1"],
    )
    spec = Spec(
        kind=kind,
        devices=[
            Device(
                name=str(i),
                container_edits=ContainerEdits(
                    device_nodes=[DeviceNode(path=f"/dev/nvidia{i}", host_path=str(node))]
                ),
            )
            for i, node in enumerate((host.nvidia0, host.nvidia1))
        ],
        container_edits=ContainerEdits(
            env=["NVIDIA_VISIBLE_DEVICES=void", "CDI_TEST=hello"],
            device_nodes=[DeviceNode(path="/dev/nvidiactl", host_path=str(host.nvidiactl))],
            mounts=[
                Mount(
                    host_path=str(host.host_file),
                    container_path="/mounted/file",
                    options=["ro", "nosuid", "nodev", "rbind"],
                )
            ],
            hooks=[hook],
        ),
    )
    spec.cdi_version = minimum_version(spec)
    return spec


@pytest.fixture
def spec_dir(tmp_path: Path, fake_gpu_host: FakeGpuHost) -> Path:
    directory = tmp_path / "cdi"
    directory.mkdir()
    (directory / "e2e.yaml").write_text(dump_yaml(e2e_spec(fake_gpu_host, "nvidia.com/gpu")))
    return directory


def oci_config(rootfs: Path, args: list[str]) -> dict[str, Any]:
    """What `runc spec` writes, made non-interactive, with an absolute, read-only rootfs (the real-node
    check's config, with the plain PATH of an image without a driver tree)."""
    config = realnode_oci_config(str(rootfs), args)
    config["process"]["env"] = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "TERM=xterm",
    ]
    config["root"]["readonly"] = True
    config["hostname"] = "cdictk-e2e"
    return config


@dataclass(frozen=True)
class Runtime:
    name: str
    binary: str
    state_dir: Path

    def run(self, bundle: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
        """Run the bundle's container to completion; returns its id and the finished process."""
        container = f"cdictk-e2e-{uuid.uuid4().hex[:12]}"
        result = subprocess.run(
            [self.binary, "--root", str(self.state_dir), "run", "--bundle", str(bundle), container],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        return container, result


# Minbase root filesystems of real releases (a real ldconfig, ld.so.conf and ld.so.cache), built once by
# tests/fetch-rootfs.sh into this cache; tests get a writable overlay of one, never the cache itself.
ROOTFS_CACHE = Path(os.environ.get("CDICTK_ROOTFS_CACHE", "/var/cache/cdictk-tests/rootfs"))
FETCH_ROOTFS = Path(__file__).resolve().parent.parent / "fetch-rootfs.sh"


def minbase(suite: str) -> Path:
    """Where tests/fetch-rootfs.sh keeps the rootfs of ``suite`` (bookworm, jammy, ...)."""
    return ROOTFS_CACHE / f"minbase-{suite}"


DEBIAN_ROOTFS = minbase("bookworm")


def fetch_minbase(*suites: str) -> dict[str, Path | str]:
    """Each suite's rootfs, built (at once, when several are missing) where root finds it missing, as
    CI must run; or one line saying why it could not be."""
    if os.geteuid() != 0:
        reason = "present" if all((minbase(s) / "sbin" / "ldconfig").exists() for s in suites) else "missing"
        pytest.skip(
            f"the minbase rootfs tests need root: overlay mounts and runc ({ROOTFS_CACHE} {reason}; "
            "sudo tests/setup-host.sh builds the Debian one)"
        )
    if "\toverlay\n" not in Path("/proc/filesystems").read_text():
        pytest.skip("this kernel has no overlayfs (modprobe overlay): the minbase rootfs is mounted as one")
    # Idempotent and quick when the cache is there; builds what is missing otherwise.
    built = subprocess.run(
        [str(FETCH_ROOTFS), str(ROOTFS_CACHE), *suites],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    found: dict[str, Path | str] = {}
    for suite in suites:
        failed = [line for line in built.stderr.splitlines() if line.startswith(f"fetch-rootfs: {suite}: ")]
        if (minbase(suite) / "sbin" / "ldconfig").exists() and not failed:
            found[suite] = minbase(suite)
        else:
            found[suite] = failed[-1] if failed else f"{FETCH_ROOTFS} failed: {built.stderr.strip()[-300:]}"
    return found


@pytest.fixture(scope="session")
def debian_rootfs_cache() -> Path:
    """The cached Debian bookworm rootfs; built here (about 30 s) when missing."""
    found = fetch_minbase("bookworm")["bookworm"]
    assert isinstance(found, Path), found
    return found


# What `make image` writes (build/image): the tests load that image when CDICTK_IMAGE_DIR names it, as CI
# does after building it once, instead of building their own.
IMAGE_DIR = os.environ.get("CDICTK_IMAGE_DIR")


@pytest.fixture(scope="session")
def node_image(tmp_path_factory: pytest.TempPathFactory) -> makeimage.Built:
    """The DaemonSet's image as `make image` builds it: from ``CDICTK_IMAGE_DIR``, or built here from
    the cached bookworm-python root (a minute or two: the pinned wheels, image-root.sh in a chroot)."""
    if IMAGE_DIR:
        out = Path(IMAGE_DIR).resolve()
        image = read_image(out / "oci")
        (archive,) = out.glob("cdictk-*.oci.tar")
        return makeimage.Built(image.reference, image.digest, out / "oci", archive)
    found = fetch_minbase("bookworm-python")["bookworm-python"]
    assert isinstance(found, Path), found
    return makeimage.build(found, tmp_path_factory.mktemp("image"))


@contextlib.contextmanager
def overlay(lower: Path, base: Path) -> Iterator[Path]:
    """A writable overlay of ``lower`` mounted at ``base/merged`` (upper and work dirs beside it)."""
    upper, work, merged = base / "upper", base / "work", base / "merged"
    for directory in (upper, work, merged):
        directory.mkdir(parents=True)
    for path in (lower, upper, work):
        assert not set(str(path)) & set(",:\\"), f"{path}: overlayfs options cannot hold this path"
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert mounted.returncode == 0, f"mount -t overlay -o {options} {merged}: {mounted.stderr}"
    try:
        yield merged
    finally:
        unmounted = subprocess.run(["umount", str(merged)], capture_output=True, text=True, check=False)
        if unmounted.returncode != 0:
            # Never leave the mount behind, but say that something still held it.
            subprocess.run(["umount", "-l", str(merged)], check=False)
            raise AssertionError(f"umount {merged}: {unmounted.stderr.strip()} (lazily unmounted)")


@pytest.fixture(params=["mountpoint", "subdir"])
def debian_rootfs(
    request: pytest.FixtureRequest, tmp_path: Path, debian_rootfs_cache: Path
) -> Iterator[Path]:
    """A fresh, writable Debian rootfs for one test, without copying the 175 MB cache.

    ``mountpoint``: the rootfs is the overlay's mount point. ``subdir``: the overlay holds the cache's
    parent and the rootfs is a plain directory in it, not a mount point. pivot_root(2) wants a mount
    point: a hook that pivots into the rootfs as it finds it fails there ("pivot_root .: invalid
    argument", NVIDIA's issue #1385).
    """
    if request.param == "mountpoint":
        with overlay(debian_rootfs_cache, tmp_path / "overlay") as merged:
            yield merged
    else:
        with overlay(debian_rootfs_cache.parent, tmp_path / "overlay") as merged:
            rootfs = merged / debian_rootfs_cache.name
            assert os.path.ismount(merged) and not os.path.ismount(rootfs)
            yield rootfs


@pytest.fixture(params=["runc", "crun"])
def runtime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    require_root()
    name = request.param
    binary = require_tool(name)
    if name == "crun":
        controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
        if controllers.exists() and controllers.read_text().strip():
            pytest.skip(
                "crun refuses hybrid cgroups with controllers left on cgroup v2 "
                f"({controllers.read_text().strip()}); tests/setup-host.sh gives them a v1 mount"
            )
    yield Runtime(name, binary, tmp_path_factory.mktemp(f"{name}-state"))


IMAGE = "localhost/cdictk-e2e-busybox:latest"


@dataclass(frozen=True)
class Podman:
    root: Path
    env: dict[str, str]

    def __call__(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        command = [
            "podman",
            "--root", str(self.root / "root"),
            "--runroot", str(self.root / "runroot"),
            "--tmpdir", str(self.root / "tmp"),
            "--network-config-dir", str(self.root / "net"),
            "--storage-driver", "vfs",
            "--cgroup-manager", "cgroupfs",
            "--events-backend", "file",
            *args,
        ]  # fmt: skip
        return subprocess.run(
            command, input=stdin, capture_output=True, env=self.env, timeout=120, check=False
        )


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory, busybox_image: Path) -> Podman:
    require_root()
    require_tool("podman")
    root = tmp_path_factory.mktemp("podman")
    for sub in ("root", "runroot", "tmp", "net"):
        (root / sub).mkdir()
    # podman's default ulimits are above this machine's hard limits, and without CAP_SYS_RESOURCE
    # the runtime cannot raise them: every run would fail with "setrlimit RLIMIT_NOFILE".
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    hybrid_v2 = controllers.exists() and controllers.read_text().strip()
    runtime = "runc" if hybrid_v2 else "crun"
    (root / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]\n'
        f'[engine]\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\nruntime = "{runtime}"\n'
    )
    env = {**os.environ, "CONTAINERS_CONF": str(root / "containers.conf")}
    podman = Podman(root, env)
    archive = subprocess.run(
        ["tar", "-C", str(busybox_image), "-c", "."], capture_output=True, check=True
    ).stdout
    imported = podman("import", "-q", "-", IMAGE, stdin=archive)
    assert imported.returncode == 0, imported.stderr.decode()
    return podman


@dataclass(frozen=True)
class LoginUser:
    """An unprivileged node user made for the session (``useradd``: a uid of the login range, and
    subordinate ids for rootless engines): the attacker of the trust tests, the rootless engine's user."""

    name: str
    uid: int
    gid: int
    home: Path

    def run(
        self, *command: str, env: dict[str, str] | None = None, input: bytes | None = None, timeout: int = 120
    ) -> subprocess.CompletedProcess[str]:
        """``command`` as this user (``runuser``), from its home, with a login's plain environment."""
        plain = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.home), "USER": self.name}
        variables = [f"{key}={value}" for key, value in {**plain, **(env or {})}.items()]
        done = subprocess.run(
            ["runuser", "-u", self.name, "--", "env", "-i", *variables, *command],
            input=input,
            capture_output=True,
            cwd=self.home,
            timeout=timeout,
            check=False,
        )
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        return subprocess.CompletedProcess(done.args, done.returncode, out, err)

    def subordinate_ids(self) -> bool:
        """Whether /etc/subuid and /etc/subgid give the user a range (useradd adds one where both exist)."""
        found = []
        for table in ("/etc/subuid", "/etc/subgid"):
            with contextlib.suppress(OSError), open(table) as file:
                found.append(any(line.split(":")[0] == self.name for line in file))
        return found == [True, True]


@pytest.fixture(scope="session")
def login_user() -> Iterator[LoginUser]:
    require_root()
    for tool in ("useradd", "userdel", "runuser"):
        require_tool(tool)
    name = f"cdictk-e2e-{os.getpid()}"
    for table in ("/etc/subuid", "/etc/subgid"):  # useradd gives a range only where the tables exist
        if not os.path.exists(table):
            Path(table).touch(0o644)
    made = subprocess.run(
        ["useradd", "--create-home", "--shell", "/bin/sh", "--user-group", name],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    account = pwd.getpwnam(name)
    try:
        yield LoginUser(name, account.pw_uid, account.pw_gid, Path(account.pw_dir))
    finally:
        # Its processes (rootless podman leaves a pause process behind), each by its own pid; read from
        # /proc, since a pristine Debian has no pgrep.
        for pid in processes_of(account.pw_uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def processes_of(uid: int) -> list[int]:
    """The pids whose real uid is ``uid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                line = next(line for line in status if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue  # gone meanwhile
        if int(line.split()[1]) == uid:
            pids.append(int(entry))
    return pids


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the DaemonSet's end-to-end test spent its time, per node (test_daemonset.py)."""
    from tests.e2e.test_daemonset import NOTES, TIMINGS  # the module that fills them, run or not

    if TIMINGS:
        terminalreporter.section("the DaemonSet on nodes without Python: where the time went")
        for node, timings in TIMINGS.items():
            for what, seconds in timings.items():
                terminalreporter.write_line(f"{node:8} {seconds:7.2f} s  {what}")
        for note in NOTES:
            terminalreporter.write_line(note)
