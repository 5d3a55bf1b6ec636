"""The sandbox that runs host ldconfig on a container rootfs: what a program sees in it.

A static probe program stands in for ldconfig and writes down, from inside, its pid, environment,
descriptors, limits, network and which paths it can open.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import hostbinary, sandbox
from tests.owners import OTHER
from tests.rootmarker import root_only
from tests.unit.startpath.hooks.sandbox_programs import Programs, mountinfo, programs, run_isolated

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
@root_only
def built(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    return programs(tmp_path_factory)


class Report:
    """What the probe wrote: ``fields["pid"] == "1"``, ``opened["/path"] == errno`` (0: it opened)."""

    def __init__(self, text: str) -> None:
        self.fields: dict[str, str] = {}
        self.opened: dict[str, int] = {}
        for line in text.splitlines():
            key, _, rest = line.partition(" ")
            if key == "open":
                path, _, code = rest.rpartition(" ")
                self.opened[path] = int(code)
            elif key == "limit":
                name, _, value = rest.partition(" ")
                self.fields[f"limit {name}"] = value
            else:
                self.fields[key] = rest


def run_probe(built: Programs, root: Path, *paths: str) -> Report:
    exe = hostbinary.load_host_binary(str(built.probe), "probe")
    try:
        with Rootfs(str(root)) as rootfs:
            sandbox.run_in_rootfs(rootfs, exe, ["probe", "/report", *paths], timeout=5, what="probe")
    finally:
        os.close(exe)
    return Report((root / "report").read_text())


# What the program sees


def test_the_program_sees_only_the_rootfs_and_nothing_of_the_hook(built: Programs, tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    os.mknod(root / "devnull", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    marker = tmp_path / "host-marker"
    marker.write_text("host\n")
    (root / "inside").write_text("container\n")
    leaked = os.open(tmp_path / "leak", os.O_CREAT | os.O_RDWR, 0o600)
    os.set_inheritable(leaked, True)  # as if the runtime had passed the hook a descriptor
    queue = _make_message_queue(0x0CD1C7)  # visible to anything in the hook's IPC namespace
    before = mountinfo()
    try:
        report = run_probe(built, root, "/inside", "/devnull", str(marker), "/proc/self/status")
    finally:
        os.close(leaked)
        _remove_message_queue(queue)
    assert report.fields["pid"] == "1"  # a PID namespace of its own
    assert report.fields["env"] == "0"
    assert report.fields["cwd"] == "/"
    assert report.fields["fds"] == "0 1 2"  # no memfd, no pipe, no leaked descriptor
    assert report.fields["std0"] == report.fields["std1"] == "1:3"
    assert {k: int(v) for k, v in report.fields.items() if k.startswith("limit ")} == {
        f"limit {name}": value for name, value in sandbox.LIMITS.items()
    }
    assert int(report.fields["connect"]) == errno.ENETUNREACH  # an empty network namespace
    assert report.fields["queue"] == str(errno.ENOENT)  # an IPC namespace of its own
    assert report.fields["no_new_privs"] == "1"
    assert report.opened["/inside"] == 0
    assert report.opened["/devnull"] == errno.EACCES  # every mount is nodev in the sandbox
    assert report.opened[str(marker)] == errno.ENOENT  # host paths do not exist in there
    assert report.opened["/proc/self/status"] == errno.ENOENT
    assert mountinfo() == before
    os.close(os.open(root / "devnull", os.O_RDONLY))  # the same node opens fine outside the sandbox


PROCFS_SCRIPT = r"""
import os, subprocess, sys
from cdictk.startpath.hooks import hostbinary, sandbox
from cdictk.startpath.helpers.rootfs import Rootfs
from tests.owners import OTHER
root, probe, volume = sys.argv[1:4]
def mount(*args):
    subprocess.run(["mount", *args], check=True)
for d in ("proc", "mnt", "stack", "vol"):
    os.mkdir(f"{root}/{d}")
mount("-t", "proc", "proc", f"{root}/proc")
mount("-t", "tmpfs", "tmpfs", f"{root}/mnt")
os.mkdir(f"{root}/mnt/p")
mount("-t", "proc", "proc", f"{root}/mnt/p")
mount("-t", "proc", "proc", f"{root}/stack")
mount("-t", "tmpfs", "tmpfs", f"{root}/stack")
mount("--bind", volume, f"{root}/vol")
before = open("/proc/self/mountinfo").read()
exe = hostbinary.load_host_binary(probe, "probe")
with Rootfs(root) as rootfs:
    sandbox.run_in_rootfs(rootfs, exe, ["probe", "/report", *sys.argv[4:]], timeout=5, what="probe")
assert open("/proc/self/mountinfo").read() == before, "the sandbox changed the hook's mounts"
assert os.path.exists(f"{root}/proc/self/status"), "the container's own /proc must stay mounted"
"""


def test_every_procfs_in_the_rootfs_is_detached_and_bind_mounts_stay(built: Programs, tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "lib.so").write_text("x")
    paths = ["/proc/self/status", "/proc/1/root", "/mnt/p/self/status", "/stack/self/status", "/vol/lib.so"]
    run_isolated(PROCFS_SCRIPT, str(root), str(built.probe), str(volume), *paths)
    opened = Report((root / "report").read_text()).opened
    assert opened == {
        "/proc/self/status": errno.ENOENT,
        "/proc/1/root": errno.ENOENT,
        "/mnt/p/self/status": errno.ENOENT,  # under another mount
        "/stack/self/status": errno.ENOENT,  # under a mount stacked on it
        "/vol/lib.so": 0,  # the runtime's bind mounts (CDI's driver libraries) are kept
    }


def test_a_rootfs_path_that_no_longer_names_the_opened_rootfs_is_refused(
    built: Programs, tmp_path: Path
) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    exe = hostbinary.load_host_binary(str(built.probe), "probe")
    try:
        with Rootfs(str(root)) as rootfs:
            root.rename(tmp_path / "moved")
            root.mkdir()
            with pytest.raises(HookError, match="no longer names the opened rootfs"):
                sandbox.run_in_rootfs(rootfs, exe, ["probe", "/report"], timeout=5, what="probe")
    finally:
        os.close(exe)
    assert not (root / "report").exists()
    assert not (tmp_path / "moved" / "report").exists()


# Outcomes


def run_program(path: Path, root: Path, argv: list[str], timeout: float = 5) -> None:
    exe = hostbinary.load_host_binary(str(path), "ldconfig")
    try:
        with Rootfs(str(root)) as rootfs:
            sandbox.run_in_rootfs(rootfs, exe, argv, timeout=timeout, what="ldconfig")
    finally:
        os.close(exe)


def test_a_program_past_its_deadline_is_killed_with_its_namespace(built: Programs, tmp_path: Path) -> None:
    token = f"cdictk-sleeper-{os.getpid()}-{time.monotonic_ns()}"
    start = time.monotonic()
    with pytest.raises(HookError, match=r"^ldconfig timed out after 0\.5 s$"):
        run_program(built.sleeper, tmp_path, ["ldconfig", token], timeout=0.5)
    assert time.monotonic() - start < 3
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and token in _cmdline(pid)]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_exit_status_and_signal_are_errors(built: Programs, tmp_path: Path) -> None:
    with pytest.raises(
        HookError, match=r"^ldconfig failed with exit status 3 \(ldconfig: cannot write the cache\)$"
    ):
        run_program(built.exit3, tmp_path, ["ldconfig"])
    with pytest.raises(HookError, match=r"^ldconfig was killed by signal 11$"):
        run_program(built.segfault, tmp_path, ["ldconfig"])


def test_the_timeout_must_be_positive(built: Programs, tmp_path: Path) -> None:
    with pytest.raises(HookError, match="positive"):
        run_program(built.exit3, tmp_path, ["ldconfig"], timeout=0)


def test_no_descriptor_is_left_behind(built: Programs, tmp_path: Path) -> None:
    before = sorted(os.listdir("/proc/self/fd"))
    run_probe(built, tmp_path)
    with pytest.raises(HookError):
        run_program(built.exit3, tmp_path, ["ldconfig"])
    with pytest.raises(HookError):
        hostbinary.load_host_binary(str(built.dynamic), "ldconfig")
    assert sorted(os.listdir("/proc/self/fd")) == before


def _make_message_queue(key: int) -> int:
    """A System V message queue under ``key`` (ctypes: Python has no msgget)."""
    libc = ctypes.CDLL(None, use_errno=True)
    queue = libc.msgget(ctypes.c_int(key), ctypes.c_int(0o1600))  # IPC_CREAT | 0600
    assert queue >= 0, os.strerror(ctypes.get_errno())
    return int(queue)


def _remove_message_queue(queue: int) -> None:
    ctypes.CDLL(None).msgctl(ctypes.c_int(queue), ctypes.c_int(0), None)  # IPC_RMID


# The host program in a user namespace of a rootless engine

_NS_FIRST = 200000  # the subordinate ids of the namespace's uids 1-999
_ROOTLESS_MAP = f"0 {OTHER} 1\n1 {_NS_FIRST + 1} 999\n"  # as rootless podman maps the user and its ids


def _load_in_a_user_namespace(paths: list[Path], *, maker: int, uid_map: str) -> list[str]:
    """load_host_binary of each path, as uid 0 of a user namespace that uid ``maker`` made and whose
    uids are mapped by ``uid_map``; "ok" or the error, each."""
    results_read, results_write = os.pipe()
    ready_read, ready_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            if maker != 0:
                os.setgroups([])
                os.setresgid(maker, maker, maker)
                os.setresuid(maker, maker, maker)
            if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:  # CLONE_NEWUSER
                os._exit(90)
            os.write(ready_write, b"x")
            os.read(mapped_read, 1)
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            lines = []
            for path in paths:
                try:
                    os.close(hostbinary.load_host_binary(str(path), "ldconfig"))
                    lines.append("ok")
                except HookError as exc:
                    lines.append(str(exc))
            os.write(results_write, "\n".join(lines).encode())
        finally:
            os._exit(0)
    os.close(results_write)
    os.read(ready_read, 1)
    Path(f"/proc/{pid}/uid_map").write_text(uid_map)
    Path(f"/proc/{pid}/setgroups").write_text("deny")
    Path(f"/proc/{pid}/gid_map").write_text(uid_map)
    os.write(mapped_write, b"x")
    os.waitpid(pid, 0)
    with os.fdopen(results_read, "rb") as results:
        text = results.read().decode()
    for fd in (ready_read, ready_write, mapped_read, mapped_write):
        os.close(fd)
    return text.split("\n")


@pytest.fixture
def owned_copies(built: Programs) -> Iterator[dict[str, Path]]:
    """The probe, copied as root's, the user's (``OTHER``, who makes the rootless namespace) and a
    subordinate id's (its uid 5)."""
    base = Path(tempfile.mkdtemp(prefix="cdictk-userns-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        copies = {}
        for name, owner in (("roots", 0), ("users", OTHER), ("subordinate", _NS_FIRST + 5)):
            copies[name] = base / name
            shutil.copy(built.probe, copies[name])
            os.chown(copies[name], owner, owner)
            os.chmod(copies[name], 0o755)
        yield copies
    finally:
        shutil.rmtree(base)


def test_a_rootless_hook_judges_the_program_by_what_its_user_could_change(
    owned_copies: dict[str, Path],
) -> None:
    """Root's ldconfig shows as the overflow uid in the namespace: it runs. One that an id of the
    namespace owns (a subordinate id: the user's containers' processes) does not. Real root's hook
    still takes only root's."""
    roots, users, subordinate = _load_in_a_user_namespace(
        list(owned_copies.values()), maker=OTHER, uid_map=_ROOTLESS_MAP
    )
    assert (roots, users) == ("ok", "ok")
    assert subordinate == (
        f"ldconfig {owned_copies['subordinate']} is owned by uid 5, not root; refusing to run it"
    )
    with pytest.raises(HookError, match=f"is owned by uid {OTHER}, not root"):
        hostbinary.load_host_binary(str(owned_copies["users"]), "ldconfig")  # as real root: root's only


def test_a_hook_in_a_namespace_root_made_takes_only_roots_files(owned_copies: dict[str, Path]) -> None:
    """A rootful engine's ``--userns``: the host's root made the namespace and maps no id to it, so
    root's file and an unmapped user's look alike (the overflow uid), and neither is the container's
    user's to vouch for. Before: both ran, as under a rootless engine; a file of the user ``OTHER``
    ran as the ldconfig of root's container."""
    roots, users, subordinate = _load_in_a_user_namespace(
        list(owned_copies.values()), maker=0, uid_map=f"0 {_NS_FIRST} 1000\n"
    )
    for name, answer in (("roots", roots), ("users", users)):
        assert answer == f"ldconfig {owned_copies[name]} is owned by uid 65534, not root; refusing to run it"
    assert "is owned by uid 5, not root" in subordinate
    # A namespace that maps the overflow uid: the owner's 65534 is no answer either.
    roots, users, _ = _load_in_a_user_namespace(
        list(owned_copies.values()), maker=0, uid_map=f"0 {_NS_FIRST} 65536\n"
    )
    assert "is owned by uid 65534" in roots and "is owned by uid 65534" in users
