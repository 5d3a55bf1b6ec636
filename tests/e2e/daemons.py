"""Real container daemons, each on a private socket under its own temp root, for end-to-end tests.

Three daemons: Debian bookworm's containerd 1.6 (/usr/bin), and containerd 2.x and dockerd 28.x from
Debian sid, which tests/fetch-daemons.sh unpacks into a cache (bookworm's own have no CDI). The machine
has no init system that could run them, and the tests must not touch a daemon the host may run, so each
test starts its own and tears it down: processes killed, mounts under its root undone, root removed.

dockerd is driven through its HTTP API on the unix socket, not a docker CLI: sid's docker.io has no
client and bookworm's is 20.10, so a matching CLI is not something a fresh machine has; and the API
calls are what `docker run` turns its flags into anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import IMAGE, require_root, require_tool

DAEMONS_CACHE = Path(os.environ.get("CDICTK_DAEMONS_CACHE", "/var/cache/cdictk-tests/daemons"))
SID_CONTAINERD_DIR = DAEMONS_CACHE / "containerd-sid" / "usr" / "bin"
SID_DOCKERD = DAEMONS_CACHE / "docker.io-sid" / "usr" / "sbin" / "dockerd"
RUNC = "/usr/sbin/runc"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
COMMAND_TIMEOUT = 120
# Hard-coded in the daemons: shim sockets, ctr's FIFOs, runc state, and dockerd's plugin socket dir.
CONTAINERD_HOST_DIRS = (
    "/run/containerd/s",
    "/run/containerd/fifo",
    "/run/containerd/runc",
    "/run/containerd",
)
DOCKERD_HOST_DIRS = ("/run/docker/plugins", "/run/docker")


def distro_containerd_dir() -> Path:
    """Where the distribution's containerd, ctr and shim live: 1.6 on bookworm, 2.2 on Ubuntu 24.04."""
    require_root()
    return Path(require_tool("containerd")).parent


def containerd_major(binary_dir: Path) -> int:
    """The major version of the containerd in ``binary_dir``, from ``containerd --version``."""
    printed = subprocess.run(
        [str(binary_dir / "containerd"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"\sv?(\d+)\.\d+\.\d+", printed)
    assert found is not None, f"no version in {printed!r}"
    return int(found.group(1))


def sid_containerd_dir() -> Path:
    """Where sid's containerd 2.x, ctr and containerd-shim-runc-v2 were unpacked."""
    require_root()
    if not (SID_CONTAINERD_DIR / "containerd").exists():
        pytest.skip(f"{SID_CONTAINERD_DIR}/containerd is missing (tests/setup-host.sh fetches it)")
    return SID_CONTAINERD_DIR


def sid_dockerd() -> Path:
    require_root()
    if not SID_DOCKERD.exists():
        pytest.skip(f"{SID_DOCKERD} is missing (tests/setup-host.sh fetches it)")
    return SID_DOCKERD


# ---- the image -------------------------------------------------------------------------------------


def goarch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def write_docker_archive(rootfs: Path, out: Path, reference: str = IMAGE) -> None:
    """A one-layer image of ``rootfs`` in the format `docker save` writes.

    Built by hand rather than with podman so that the daemon tests do not depend on podman working:
    both `ctr images import` and dockerd's image load accept this format.
    """
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for entry in sorted(os.listdir(rootfs)):
            tar.add(rootfs / entry, arcname=entry)
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": goarch(),
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["/bin/sh"],
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "cdictk end-to-end tests: busybox-static rootfs"}],
    }
    config_bytes = json.dumps(config).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [f"{diff_id}/layer.tar"]}]
    with tarfile.open(out, mode="w") as tar:
        for name, data in (
            (f"{diff_id}/layer.tar", layer_bytes),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))


# Named apart from the fixture so that a test module can import it without its tests' `image_tar`
# arguments shadowing the import.
@pytest.fixture(scope="session", name="image_tar")
def image_tar_fixture(tmp_path_factory: pytest.TempPathFactory, busybox_image: Path) -> Path:
    """The busybox rootfs as a docker-archive tar, tagged ``IMAGE``. Import ``image_tar_fixture`` to use it."""
    out = tmp_path_factory.mktemp("image") / "busybox.tar"
    write_docker_archive(busybox_image, out)
    return out


# ---- private roots and their teardown -------------------------------------------------------------


def mounts_under(root: Path) -> list[str]:
    prefix = f"{root}/"
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            # Field 5 is the mount point, with space, tab, newline and backslash written as octal escapes.
            point = line.split()[4].encode().decode("unicode_escape")
            if point == str(root) or point.startswith(prefix):
                found.append(point)
    return found


def unmount_all(root: Path) -> None:
    # Deepest first; lazy, because a dying shim can still hold a container's rootfs for a moment.
    # Stacked mounts on one point show up once per layer, so go round until none is left.
    for _ in range(10):
        points = mounts_under(root)
        if not points:
            return
        for point in sorted(set(points), key=lambda p: p.count("/"), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    raise RuntimeError(f"mounts left under {root}: {mounts_under(root)}")


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if text.encode() in cmdline:
            pids.append(int(entry))
    return pids


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # The command name in parentheses may hold spaces; the ppid is the second field after it.
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _kill_tree(pid: int) -> None:
    # Children first: a shim is the subreaper of its container, so killing the shim first would hand the
    # container's processes to init, where nothing names them any more.
    for child in _children(pid):
        _kill_tree(child)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _remove_cgroups(name: str) -> None:
    """Removes the (empty) cgroup directories named ``name`` that a daemon's containers were put under."""
    base = Path("/sys/fs/cgroup")
    for controller in base.iterdir():
        group = controller / name
        if group.is_dir():
            # Leaf groups first; rmdir is the only way to delete a cgroup, and only an empty one.
            for sub in sorted(group.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()


@contextlib.contextmanager
def private_root(prefix: str, host_dirs: Sequence[str] = ()) -> Iterator[Path]:
    """A temp dir for one daemon. On exit: anything still running that names it is killed, everything
    mounted under it is unmounted, and it is removed.

    It lives directly under /tmp rather than in pytest's tmp_path: unix socket paths are limited to
    107 bytes, and the daemons derive longer socket paths from the ones they are given.

    ``host_dirs`` (deepest first) are fixed paths the daemon creates whatever its config says; those
    that did not exist before are removed again if empty, so a host daemon's dirs are never touched.
    """
    new_dirs = [d for d in host_dirs if not os.path.lexists(d)]
    root = Path(tempfile.mkdtemp(prefix=f"cdictk-{prefix}-", dir="/tmp"))
    try:
        yield root
    finally:
        # Shims outlive their daemon by design; they carry the daemon's socket path in their arguments.
        for pid in _processes_mentioning(str(root)):
            _kill_tree(pid)
        unmount_all(root)
        shutil.rmtree(root)
        for directory in new_dirs:
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}:\n{log_tail(log)}")
        if ready():
            return
        time.sleep(0.01)
    raise RuntimeError(f"{process.args!r} did not {what} within {START_TIMEOUT} s:\n{log_tail(log)}")


def accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ---- containerd ------------------------------------------------------------------------------------


@dataclass
class Containerd:
    """A running containerd. ``ctr`` runs the ctr from the same directory, on this daemon's socket and namespace."""

    binary_dir: Path
    root: Path
    config: Path
    socket: Path
    namespace: str
    log: Path
    env: dict[str, str]
    command: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    def start(self, config_text: str) -> None:
        """Start containerd on this root, state and socket with ``config_text`` (made isolated)."""
        self.config.write_text(isolated_containerd_config(config_text, self.root))
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env
            )
        _wait_until(lambda: accepts(self.socket), self.process, self.log, f"listen on {self.socket}")

    def restart(self, config_text: str) -> None:
        """Stop containerd and start it again with ``config_text``: what its root holds (images, their
        content) stays, so a test can change a setting for the price of a restart, not of imports.
        Nothing should be running: containers left are the new daemon's to recover."""
        if self.process is not None:
            _stop(self.process)
        self.socket.unlink(missing_ok=True)
        self.start(config_text)

    def ctr(
        self, *args: str, namespace: str | None = None, timeout: float = COMMAND_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        command = [
            str(self.binary_dir / "ctr"),
            "--address", str(self.socket),
            "--namespace", namespace or self.namespace,
        ]  # fmt: skip
        return subprocess.run(
            [*command, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def dump_config(self) -> dict[str, Any]:
        """`containerd config dump` of this daemon's config file, parsed: what containerd made of it."""
        dumped = subprocess.run(
            [str(self.binary_dir / "containerd"), "--config", str(self.config), "config", "dump"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        if dumped.returncode != 0:
            raise RuntimeError(f"containerd config dump failed ({dumped.returncode}): {dumped.stderr}")
        return tomllib.loads(dumped.stdout)

    def delete_all_tasks(self) -> None:
        """Kills and deletes every task in every namespace, dockerd's included.

        Through containerd, so that each shim reaps its container, runc removes the cgroups, and the
        shim exits and removes its socket; killing shims instead leaves all three behind.
        """
        for namespace in self.ctr("namespaces", "list", "--quiet").stdout.split():
            tasks = self.ctr("tasks", "list", "--quiet", namespace=namespace).stdout.split()
            if tasks:
                self.ctr("tasks", "delete", "--force", *tasks, namespace=namespace)

    def import_image(self, tar: Path) -> None:
        imported = self.ctr("images", "import", str(tar))
        if imported.returncode != 0:
            raise RuntimeError(f"ctr images import {tar} failed: {imported.stderr}{imported.stdout}")

    def run(
        self,
        image: str,
        command: Sequence[str],
        *,
        runtime: str = "io.containerd.runc.v2",
        options: Sequence[str] = (),
        detach: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """`ctr run --rm` (or ``--detach``) of ``command`` in a new container; ``options`` go before the image.

        A detached container is killed and deleted when the daemon is torn down.
        """
        container = f"cdictk-e2e-{uuid.uuid4().hex[:12]}"
        # --runc-root and --fifo-dir keep runc's state and the FIFOs under our root instead of /run/containerd.
        return self.ctr(
            "run",
            "--detach" if detach else "--rm",
            "--runtime",
            runtime,
            "--runc-root",
            str(self.root / "runc"),
            "--fifo-dir",
            str(self.root / "fifo"),
            *options,
            image,
            container,
            *command,
        )


def isolated_containerd_config(config_text: str, root: Path) -> str:
    """``config_text`` plus the sections that keep containerd's files out of /opt and /run/nri.

    The test's own values win: a section it already has is left alone. root, state and the socket are
    set with command-line flags, which override the file, so the text needs no change for them.
    """
    parsed = tomllib.loads(config_text)
    plugins = parsed.get("plugins", {})
    extra = []
    if "io.containerd.internal.v1.opt" not in plugins:
        extra.append(f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{root / "opt"}"\n')
    # containerd 1.6 has no NRI and ignores the section.
    if "io.containerd.nri.v1.nri" not in plugins:
        extra.append('[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n')
    return config_text.rstrip("\n") + "\n\n" + "\n".join(extra)


@contextlib.contextmanager
def containerd_daemon(binary_dir: Path, config_text: str = "version = 2\n") -> Iterator[Containerd]:
    """containerd from ``binary_dir`` with ``config_text`` as its config file, on a private socket.

    ``config_text`` should say ``version = 2`` or ``3``: the isolating sections appended to it use the
    v2/v3 plugin names, which containerd 1.6 ignores in a version 1 config.
    """
    with private_root("containerd", CONTAINERD_HOST_DIRS) as root:
        namespace = f"cdictk-e2e-{uuid.uuid4().hex[:8]}"
        config = root / "config.toml"
        sock = root / "containerd.sock"
        log = root / "containerd.log"
        # The shims come from PATH, so each containerd gets its own containerd-shim-runc-v2.
        env = {**os.environ, "PATH": f"{binary_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        command = [
            str(binary_dir / "containerd"),
            "--config", str(config),
            "--root", str(root / "root"),
            "--state", str(root / "state"),
            "--address", str(sock),
        ]  # fmt: skip
        daemon = Containerd(binary_dir, root, config, sock, namespace, log, env, command)
        try:
            daemon.start(config_text)
            yield daemon
        finally:
            process = daemon.process
            if process is not None:
                if process.poll() is None:
                    daemon.delete_all_tasks()
                _stop(process)
            # Containers that ctr did not name a --runc-root for keep runc's state here, per namespace.
            shutil.rmtree(f"/run/containerd/runc/{namespace}", ignore_errors=True)
            _remove_cgroups(namespace)


# ---- dockerd ---------------------------------------------------------------------------------------


class DockerError(RuntimeError):
    """dockerd answered an API call with an error; ``message`` is its text, as the docker CLI prints it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"dockerd: HTTP {status}: {message}")
        self.status = status
        self.message = message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        self.sock = sock


def _demux(stream: bytes) -> tuple[str, str]:
    """stdout and stderr from a non-tty container's log stream: frames of an 8-byte header (stream
    number, 3 zero bytes, big-endian length) and the payload."""
    parts: dict[int, list[bytes]] = {1: [], 2: []}
    offset = 0
    while offset + 8 <= len(stream):
        kind = stream[offset]
        size = int.from_bytes(stream[offset + 4 : offset + 8], "big")
        parts.setdefault(kind, []).append(stream[offset + 8 : offset + 8 + size])
        offset += 8 + size
    return b"".join(parts[1]).decode(errors="replace"), b"".join(parts[2]).decode(errors="replace")


@dataclass
class Dockerd:
    """A running dockerd, with its own containerd (``containerd``) underneath."""

    root: Path
    config: Path
    socket: Path
    log: Path
    containerd: Containerd

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        timeout: float = COMMAND_TIMEOUT,
    ) -> bytes:
        """One call of the Engine API; ``body`` is sent as JSON, ``raw`` as a tar. Raises DockerError."""
        connection = _UnixConnection(self.socket, timeout)
        try:
            headers = {}
            payload: bytes | None = None
            if raw is not None:
                payload, headers["Content-Type"] = raw, "application/x-tar"
            elif body is not None:
                payload, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        if response.status >= 400:
            try:
                message = str(json.loads(data)["message"])
            except (ValueError, KeyError, TypeError):
                message = data.decode(errors="replace")
            raise DockerError(response.status, message)
        return data

    def ping(self) -> bool:
        try:
            return self.api("GET", "/_ping", timeout=1) == b"OK"
        except (OSError, http.client.HTTPException, DockerError):
            return False

    def remove_all_containers(self) -> None:
        """`docker rm --force` of every container.

        On SIGTERM dockerd would stop each running container with SIGTERM and wait its stop timeout,
        10 s, before SIGKILL; a shell as PID 1 ignores SIGTERM, so each would cost the full 10 s.
        """
        with contextlib.suppress(DockerError, OSError):
            for container in json.loads(self.api("GET", "/containers/json?all=1")):
                self.api("DELETE", f"/containers/{container['Id']}?force=1")

    def info(self) -> dict[str, Any]:
        """`docker info` as JSON: ``Runtimes``, ``CDISpecDirs``, ``ServerVersion``, ..."""
        info: dict[str, Any] = json.loads(self.api("GET", "/info"))
        return info

    def load_image(self, tar: Path) -> None:
        """`docker load -i tar`."""
        answer = self.api("POST", "/images/load?quiet=1", raw=tar.read_bytes())
        # Errors during the load come back with status 200, as a JSON message in the stream.
        for line in answer.decode(errors="replace").splitlines():
            if line.strip() and "error" in json.loads(line):
                raise DockerError(200, json.loads(line)["error"])

    def run(
        self,
        image: str,
        args: Sequence[str],
        *,
        runtime: str | None = None,
        cdi_devices: Sequence[str] = (),
        env: Sequence[str] = (),
        host_config: dict[str, Any] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`docker run --rm --network none [--runtime R] [--device vendor/class=name ...] image args...`.

        A CDI name given to `docker run --device` reaches dockerd as a device request for the "cdi"
        driver; ``cdi_devices`` sends exactly that. ``host_config`` adds other HostConfig fields.
        Errors that `docker run` would print (an unknown runtime, an unresolvable CDI device) raise
        DockerError; the container's exit status is the returncode.
        """
        hc: dict[str, Any] = {"NetworkMode": "none", **(host_config or {})}
        if runtime is not None:
            hc["Runtime"] = runtime
        if cdi_devices:
            hc.setdefault("DeviceRequests", []).append({"Driver": "cdi", "DeviceIDs": list(cdi_devices)})
        name = f"cdictk-e2e-{uuid.uuid4().hex[:12]}"
        create = {"Image": image, "Cmd": list(args), "Env": list(env), "HostConfig": hc}
        container = json.loads(self.api("POST", f"/containers/create?name={name}", create))["Id"]
        try:
            self.api("POST", f"/containers/{container}/start")
            status = json.loads(self.api("POST", f"/containers/{container}/wait"))["StatusCode"]
            logs = self.api("GET", f"/containers/{container}/logs?stdout=1&stderr=1")
        finally:
            with contextlib.suppress(DockerError):
                self.api("DELETE", f"/containers/{container}?force=1")
        stdout, stderr = _demux(logs)
        return subprocess.CompletedProcess(["docker", "run", image, *args], int(status), stdout, stderr)


def _dockerd_env(dockerd: Path, env: dict[str, str]) -> dict[str, str]:
    # dockerd looks up docker-proxy and docker-init on PATH, and refuses to start (or to --validate)
    # without docker-proxy; sid's package has them in sbin and bin.
    path = (
        f"{dockerd.parent}:{dockerd.parent.parent / 'bin'}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    )
    return {**env, "PATH": path}


def validate_daemon_json(config: Path, dockerd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`dockerd --config-file CONFIG --validate`: prints "configuration OK" and exits 0 when dockerd accepts it."""
    binary = dockerd or sid_dockerd()
    return subprocess.run(
        [str(binary), "--config-file", str(config), "--validate"],
        env=_dockerd_env(binary, dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


# Keys the harness owns: they put every file, socket and cgroup of the daemon under its private root.
_DOCKERD_OWNED = (
    "data-root",
    "exec-root",
    "pidfile",
    "hosts",
    "containerd",
    "containerd-namespace",
    "cgroup-parent",
)
# Defaults a test may override: no bridge and no firewall rules on the host.
_DOCKERD_DEFAULTS: dict[str, Any] = {"bridge": "none", "iptables": False, "ip6tables": False}


@contextlib.contextmanager
def dockerd_daemon(
    daemon_json: dict[str, Any] | None = None,
    *,
    dockerd: Path | None = None,
    containerd_dir: Path | None = None,
    env: dict[str, str] | None = None,
    path_dirs: Sequence[Path] = (),
) -> Iterator[Dockerd]:
    """dockerd (sid's 28.x by default) with ``daemon_json`` merged into a private config.

    ``env`` is added to its environment and ``path_dirs`` go first on its PATH: dockerd looks up
    ``nvidia-container-runtime-hook`` there, and gives that hook its own environment.

    dockerd would start a containerd of its own with NRI on and /opt/containerd as its opt dir; it gets
    one from ``containerd_daemon`` instead (sid's 2.x by default), so nothing lands outside the roots.
    """
    daemon_json = daemon_json or {}
    clash = sorted(set(daemon_json) & set(_DOCKERD_OWNED))
    if clash:
        raise ValueError(f"the harness sets {clash} itself, to keep dockerd's files under its temp root")
    binary = dockerd or sid_dockerd()
    ctrd_dir = containerd_dir or sid_containerd_dir()
    with containerd_daemon(ctrd_dir) as containerd, private_root("dockerd", DOCKERD_HOST_DIRS) as root:
        sock = root / "docker.sock"
        group = f"cdictk-e2e-docker-{uuid.uuid4().hex[:8]}"
        config = {
            **_DOCKERD_DEFAULTS,
            **daemon_json,
            "data-root": str(root / "data"),
            "exec-root": str(root / "exec"),
            "pidfile": str(root / "dockerd.pid"),
            "hosts": [f"unix://{sock}"],
            "containerd": str(containerd.socket),
            "containerd-namespace": group,
            "cgroup-parent": group,
        }
        config_path = root / "daemon.json"
        config_path.write_text(json.dumps(config, indent=2))
        log = root / "dockerd.log"
        daemon_env = _dockerd_env(binary, {**containerd.env, **(env or {})})
        daemon_env["PATH"] = ":".join([*map(str, path_dirs), daemon_env["PATH"]])
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(binary), "--config-file", str(config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=daemon_env,
            )
        docker = Dockerd(root, config_path, sock, log, containerd)
        try:
            # dockerd makes its socket first and then initializes, and exits if that fails: a socket
            # that accepts is no sign of a daemon that will answer.
            _wait_until(docker.ping, process, log, f"answer on {sock}")
            yield docker
        finally:
            if process.poll() is None:
                docker.remove_all_containers()
            _stop(process)
            _remove_cgroups(group)
