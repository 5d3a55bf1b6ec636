"""The container a prestart hook works on: the OCI state checked, the process pinned, namespaces vetted.

Real processes stand in for containers: ``unshare --mount sleep`` has a mount namespace of its own, a
plain ``sleep`` shares ours (the host's). A fake ``/proc`` (plain files whose identities play the
namespaces) covers the cases that are hard to set up for real.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.prestart.container import Container, alive, container_of
from tests.rootmarker import root_only

DEADLINE_S = 10.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.01)


def ns_identity(pid: int | str, name: str) -> tuple[int, int]:
    st = os.stat(f"/proc/{pid}/ns/{name}")
    return st.st_dev, st.st_ino


def spawn(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=DEADLINE_S)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process in our mount namespace."""
    process = spawn("sleep", "30")
    yield process
    stop(process)


def unshared(*flags: str) -> Iterator[subprocess.Popen[bytes]]:
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    process = spawn("unshare", *flags, "sleep", "30")
    ours = ns_identity("self", "mnt")
    try:
        # unshare(2) happens just after the fork: until then the child is still in our namespace.
        wait_for(lambda: process.poll() is not None or ns_identity(process.pid, "mnt") != ours, "unshare")
        assert process.poll() is None, f"unshare {' '.join(flags)} exited with {process.returncode}"
        yield process
    finally:
        stop(process)


@pytest.fixture
@root_only
def container_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process in a mount namespace of its own, as a container's is."""
    yield from unshared("--mount")


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def fake_proc(
    base: Path,
    pid: int,
    *,
    same_mnt: bool = False,
    same_user: bool = True,
    root: str = "/",
    uid_map: str = "         0          0 4294967295\n",
) -> str:
    """A /proc whose ``pid/ns/*`` are (hard links to) ``self/ns/*`` where ``same_*`` says so, and whose
    ``pid/root`` points at ``root`` (the host's, for a container being created)."""
    (base / "self" / "ns").mkdir(parents=True)
    (base / str(pid) / "ns").mkdir(parents=True)
    (base / str(pid) / "root").symlink_to(root)
    (base / "self" / "uid_map").write_text(uid_map)
    for name, same in (("mnt", same_mnt), ("user", same_user)):
        (base / "self" / "ns" / name).write_text(name)
        theirs = base / str(pid) / "ns" / name
        if same:
            os.link(base / "self" / "ns" / name, theirs)
        else:
            theirs.write_text(name)
    return str(base)


# ---- container_of: the state and the config ----------------------------------------------------------


def state(**fields: Any) -> dict[str, Any]:
    return {"ociVersion": "1.0.2", "id": "c1", "status": "created", "bundle": "/run/bundle", **fields}


CONFIG = {"root": {"path": "rootfs"}}


@pytest.mark.parametrize("pid", [None, True, False, 1, 0, -5, "1234", 12.0])
def test_a_pid_that_cannot_be_the_containers_is_refused(pid: Any) -> None:
    fields = {} if pid is None else {"pid": pid}
    with pytest.raises(HookError, match="OCI state: pid must be the container's process id") as info:
        container_of(state(**fields), CONFIG)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bundle", ["run/bundle", "", None, 7])
def test_a_bundle_that_is_not_an_absolute_path_is_refused(bundle: Any) -> None:
    with pytest.raises(HookError, match="bundle must be an absolute path"):
        container_of(state(pid=os.getpid(), bundle=bundle), CONFIG)


def test_the_rootfs_is_root_path_under_the_bundle(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, os.getpid())
    with container_of(state(pid=os.getpid()), CONFIG, proc_root=proc) as container:
        assert (container.id, container.pid, container.rootfs) == ("c1", os.getpid(), "/run/bundle/rootfs")
    absolute = {"root": {"path": "/var/lib/c1/merged"}}
    with container_of(state(pid=os.getpid()), absolute, proc_root=proc) as container:
        assert container.rootfs == "/var/lib/c1/merged"


def test_crun_s_root_in_the_state_wins_over_the_config(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, os.getpid())
    given = state(pid=os.getpid(), root="/run/crun/c1/rootfs")
    with container_of(given, {"root": {"path": "elsewhere"}}, proc_root=proc) as container:
        assert container.rootfs == "/run/crun/c1/rootfs"


@pytest.mark.parametrize("config", [{}, {"root": "rootfs"}, {"root": {"path": 3}}, {"root": {}}])
def test_a_config_without_a_root_path_is_refused(tmp_path: Path, config: dict[str, Any]) -> None:
    with pytest.raises(HookError, match=r"root\.path: missing or not a string"):
        container_of(state(pid=os.getpid()), config, proc_root=fake_proc(tmp_path, os.getpid()))


@pytest.mark.parametrize("root", ["/", " / ", "", "..", "../..", "rootfs/../../.."])
def test_the_hosts_root_is_never_the_rootfs(tmp_path: Path, root: str) -> None:
    proc = fake_proc(tmp_path, os.getpid())
    with pytest.raises(HookError, match="refused"):
        container_of(state(pid=os.getpid(), bundle="/b"), {"root": {"path": root}}, proc_root=proc)
    with pytest.raises(HookError, match="refused"):
        container_of(state(pid=os.getpid(), bundle="/b", root=root), CONFIG, proc_root=proc)


# ---- pinning the process --------------------------------------------------------------------------------


@pytest.mark.root
def test_a_process_with_its_own_mount_namespace_is_pinned(container_process: subprocess.Popen[bytes]) -> None:
    fds = open_fds()
    pid = container_process.pid
    with container_of(state(pid=pid), CONFIG) as container:
        assert container.pid == pid and container.rootfs == "/run/bundle/rootfs"
        mnt = os.fstat(container.mnt_ns)
        assert (mnt.st_dev, mnt.st_ino) == ns_identity(pid, "mnt")
        assert alive(container.pidfd)
        assert len(open_fds() - fds) == 2  # the pidfd and the namespace
    assert open_fds() == fds


def test_a_process_in_our_mount_namespace_is_refused(sleeper: subprocess.Popen[bytes]) -> None:
    fds = open_fds()
    with pytest.raises(HookError, match="shares the host's mount namespace"):
        container_of(state(pid=sleeper.pid), CONFIG)
    assert open_fds() == fds  # nothing held after a refusal


@pytest.mark.root
def test_a_process_in_a_user_namespace_is_refused() -> None:
    for process in unshared("--user", "--map-root-user", "--mount"):
        fds = open_fds()
        with pytest.raises(HookError, match="user namespace are not supported"):
            container_of(state(pid=process.pid), CONFIG)
        assert open_fds() == fds


@pytest.mark.parametrize(
    ("same_mnt", "same_user", "words"),
    [(True, True, "shares the host's mount namespace"), (False, False, "user namespace")],
)
def test_namespaces_are_compared_through_the_given_proc(
    tmp_path: Path, same_mnt: bool, same_user: bool, words: str
) -> None:
    proc = fake_proc(tmp_path, os.getpid(), same_mnt=same_mnt, same_user=same_user)
    with pytest.raises(HookError, match=words):
        Container(id="c", pid=os.getpid(), rootfs="/r", proc_root=proc)


def test_a_proc_without_the_namespace_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(HookError, match=f"{tmp_path}/{os.getpid()}/ns/mnt: No such file or directory"):
        Container(id="c", pid=os.getpid(), rootfs="/r", proc_root=str(tmp_path))


def test_a_pid_that_does_not_exist_is_refused() -> None:
    process = spawn("true")
    process.wait(timeout=DEADLINE_S)  # reaped: its pid is free (and, this soon, not reused)
    with pytest.raises(HookError, match=f"container process {process.pid}: No such process"):
        container_of(state(pid=process.pid), CONFIG)


@pytest.mark.root
def test_alive_turns_false_once_the_process_exits_even_before_it_is_reaped(
    container_process: subprocess.Popen[bytes],
) -> None:
    with container_of(state(pid=container_process.pid), CONFIG) as container:
        assert alive(container.pidfd)
        os.kill(container_process.pid, signal.SIGKILL)
        wait_for(lambda: not alive(container.pidfd), "the pidfd polls readable")
        # Not reaped yet: the zombie is still there for waitid to collect.
        info = os.waitid(os.P_PID, container_process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        assert info is not None and info.si_pid == container_process.pid
        container_process.wait(timeout=DEADLINE_S)
        assert not alive(container.pidfd)


def test_a_process_that_exits_before_the_check_is_refused(tmp_path: Path) -> None:
    process = spawn("sleep", "30")
    try:
        proc = fake_proc(tmp_path, process.pid)
        pidfd = os.pidfd_open(process.pid)
        try:
            os.kill(process.pid, signal.SIGKILL)
            wait_for(lambda: not alive(pidfd), "the process exits")
        finally:
            os.close(pidfd)
        # A zombie still has a pid to pin, but the hook must not work on it.
        with pytest.raises(HookError, match=f"container process {process.pid} exited"):
            Container(id="c", pid=process.pid, rootfs="/r", proc_root=proc)
    finally:
        stop(process)


def test_a_process_whose_root_is_not_the_hosts_is_refused(tmp_path: Path) -> None:
    """Pivoted already (started, or another runtime's stage): its namespace's / would be the image's."""
    image_root = tmp_path / "image"
    image_root.mkdir()
    proc = fake_proc(tmp_path / "proc", os.getpid(), root=str(image_root))
    with pytest.raises(HookError, match="has left the host's root already"):
        Container(id="c", pid=os.getpid(), rootfs="/r", proc_root=proc)


@pytest.mark.parametrize("status", ["running", "stopped", "", None])
def test_a_state_of_a_started_or_stopped_container_is_refused(status: str | None) -> None:
    with pytest.raises(HookError, match=r"status .*: the prestart hook runs while a container is created"):
        container_of(state(pid=os.getpid(), status=status), {"root": {"path": "rootfs"}})


def test_a_rootless_engine_is_told_to_use_cdi(tmp_path: Path) -> None:
    """The hook itself in a user namespace (rootless Docker): mknod and cgroup writes would fail."""
    proc = fake_proc(tmp_path, os.getpid(), uid_map="         0       1000          1\n")
    with pytest.raises(HookError, match=r"^a rootless engine cannot give GPUs through this hook .*use CDI$"):
        Container(id="c", pid=os.getpid(), rootfs="/r", proc_root=proc)
