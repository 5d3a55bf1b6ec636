"""disable-device-node-modification: a read-only copy mounted over the container's params file.

Every case that could mount runs in a child process with a private mount namespace of its own: the
child builds a container /proc (a tmpfs standing in for runc's procfs mount) under tmp_path, runs the
step, reports what it saw as JSON and exits, taking its mounts with it. The test process's own
mountinfo must be the same before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.devicenodes import MAX_PARAMS, disable_device_node_modification, switched_off
from tests import REPO

HOST_ON = "RmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileMode: 438\n"
HOST_OFF = HOST_ON.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0")

CHILD = r"""
import errno, json, os, sys
from cdictk.startpath.helpers import syscalls
from cdictk.startpath.hooks import devicenodes
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs

cfg = json.loads(sys.argv[1])
syscalls.unshare(syscalls.CLONE_NEWNS)
syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)

root = cfg["root"]
proc = os.path.join(root, "proc")
os.makedirs(proc, exist_ok=True)
syscalls.mount("container-proc", proc, "tmpfs", 0, "mode=0755")
params = os.path.join(proc, "driver/nvidia/params")
if cfg["target"] != "missing":
    os.makedirs(os.path.dirname(params))
if cfg["target"] == "file":
    with open(params, "w") as f:
        f.write(cfg["container"])
elif cfg["target"] == "symlink":
    os.symlink(cfg["victim"], params)
elif cfg["target"] == "dir":
    os.mkdir(params)

if cfg.get("fallback"):
    # As on Linux < 6.15: nothing can be cloned out of a mount that was never attached.
    real_open_tree, calls = syscalls.open_tree, []
    def open_tree(fd, path, flags):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_open_tree(fd, path, flags)
    syscalls.open_tree = open_tree

def tree():
    found = []
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            found.append([os.path.relpath(path, root), oct(os.lstat(path).st_mode & 0o170000)])
    return sorted(found)

def mounts():
    with open("/proc/self/mountinfo") as f:
        return f.read().splitlines()

before_tree, before_mounts = tree(), mounts()
result = {"calls": []}
kwargs = {} if cfg["expected_fs"] == "proc" else {"expected_fs": syscalls.TMPFS_MAGIC}
with Rootfs(root) as rootfs:
    for _ in range(cfg.get("runs", 1)):
        try:
            result["calls"].append(devicenodes.disable_device_node_modification(rootfs, cfg["host"], **kwargs))
        except HookError as exc:
            result["calls"].append("HookError: " + str(exc))
result["tree_changed"] = tree() != before_tree
result["new_mounts"] = [line for line in mounts() if line not in before_mounts]
if cfg["target"] == "file":
    with open(params) as f:
        result["content"] = f.read()
    try:
        os.close(os.open(params, os.O_WRONLY))
        result["write"] = "ok"
    except OSError as exc:
        result["write"] = errno.errorcode[exc.errno]
print(json.dumps(result))
"""


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("this test mounts in a private mount namespace, which needs root (run the tests as root)")


def own_mounts() -> str:
    with open("/proc/self/mountinfo") as f:
        return f.read()


def run_child(tmp_path: Path, **cfg: Any) -> dict[str, Any]:
    """Run CHILD in its own mount namespace; check that nothing it mounted reached this process."""
    require_root()
    cfg.setdefault("root", str(tmp_path / "rootfs"))
    cfg.setdefault("target", "file")
    cfg.setdefault("container", HOST_ON)
    cfg.setdefault("expected_fs", "tmpfs")
    before = own_mounts()
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r})\n{CHILD}",
            json.dumps(cfg),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert own_mounts() == before
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.fixture
def host(tmp_path: Path) -> Path:
    path = tmp_path / "host-params"
    path.write_text(HOST_ON)
    os.chmod(path, 0o444)
    return path


@pytest.mark.root
@pytest.mark.parametrize("fallback", [False, True], ids=["open_tree", "child-namespace"])
def test_container_sees_a_read_only_copy_saying_0(tmp_path: Path, host: Path, fallback: bool) -> None:
    report = run_child(tmp_path, host=str(host), fallback=fallback, runs=2)
    assert report["calls"] == [True, False]  # the second run finds "ModifyDeviceFiles: 0": idempotent
    assert report["content"] == HOST_OFF
    assert report["write"] == "EROFS"
    assert host.read_text() == HOST_ON
    assert report["tree_changed"] is False  # no directory, file or mount point left in the rootfs
    [line] = report["new_mounts"]
    fields = line.split()
    assert fields[3:6] == [
        "/params",
        str(tmp_path / "rootfs/proc/driver/nvidia/params"),
        "ro,nosuid,nodev,noexec,relatime",
    ]
    assert "shared:" not in line
    assert "master:" not in line
    assert fields[-3:-1] == ["tmpfs", "cdictk"]


@pytest.mark.root
def test_host_saying_0_mounts_nothing(tmp_path: Path, host: Path) -> None:
    os.chmod(host, 0o644)
    host.write_text(HOST_OFF)
    report = run_child(tmp_path, host=str(host))
    assert report["calls"] == [False]
    assert report["new_mounts"] == []
    assert report["content"] == HOST_ON


@pytest.mark.root
def test_no_driver_on_the_host_mounts_nothing(tmp_path: Path) -> None:
    report = run_child(tmp_path, host=str(tmp_path / "no-such-params"))
    assert report["calls"] == [False]
    assert report["new_mounts"] == []


@pytest.mark.root
def test_container_without_params_is_left_alone(tmp_path: Path, host: Path) -> None:
    report = run_child(tmp_path, host=str(host), target="missing")
    assert report["calls"] == [False]
    assert report["new_mounts"] == []
    assert report["tree_changed"] is False


@pytest.mark.root
def test_symlink_planted_at_the_target_is_refused(tmp_path: Path, host: Path) -> None:
    victim = tmp_path / "host-victim"
    victim.write_text("ModifyDeviceFiles: 1\n")
    report = run_child(tmp_path, host=str(host), target="symlink", victim=str(victim))
    [call] = report["calls"]
    assert call.startswith("HookError: ") and "symbolic link" in call
    assert report["new_mounts"] == []
    assert victim.read_text() == "ModifyDeviceFiles: 1\n"
    assert host.read_text() == HOST_ON


@pytest.mark.root
def test_directory_at_the_target_is_refused(tmp_path: Path, host: Path) -> None:
    report = run_child(tmp_path, host=str(host), target="dir")
    [call] = report["calls"]
    assert "not a regular file" in call
    assert report["new_mounts"] == []


@pytest.mark.root
def test_default_refuses_a_target_that_is_not_on_procfs(tmp_path: Path, host: Path) -> None:
    report = run_child(tmp_path, host=str(host), expected_fs="proc")
    [call] = report["calls"]
    assert call.startswith("HookError: ") and "not 0x9fa0 (procfs)" in call
    assert report["new_mounts"] == []
    assert report["content"] == HOST_ON
    assert report["write"] == "ok"


def test_switched_off_changes_only_the_exact_line() -> None:
    assert switched_off(b"A: 1\nModifyDeviceFiles: 1\nB: 1\n") == b"A: 1\nModifyDeviceFiles: 0\nB: 1\n"
    assert switched_off(b"ModifyDeviceFiles: 1") == b"ModifyDeviceFiles: 0"
    assert switched_off(b"ModifyDeviceFiles: 0\n") is None
    assert switched_off(b"ModifyDeviceFiles: 10\nXModifyDeviceFiles: 1\n") is None
    assert switched_off(b"") is None


def test_oversized_host_file_is_an_error(tmp_path: Path) -> None:
    big = tmp_path / "params"
    big.write_bytes(b"ModifyDeviceFiles: 1\n" + b"x" * MAX_PARAMS)
    (tmp_path / "rootfs").mkdir()
    with Rootfs(str(tmp_path / "rootfs")) as rootfs, pytest.raises(HookError, match="larger than"):
        disable_device_node_modification(rootfs, str(big))


def test_host_path_that_is_not_a_regular_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "rootfs").mkdir()
    with Rootfs(str(tmp_path / "rootfs")) as rootfs, pytest.raises(HookError, match="not a regular file"):
        disable_device_node_modification(rootfs, str(tmp_path))


def test_module_imports_no_heavy_standard_module() -> None:
    banned = ("ctypes", "typing", "dataclasses", "re", "json", "subprocess", "enum", "argparse", "socket")
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); import cdictk.startpath.hooks.devicenodes; "
        f"print(','.join(m for m in {banned!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
