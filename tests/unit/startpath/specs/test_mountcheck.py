"""cdictk.startpath.specs.mountcheck: the host paths of a container's edits, checked where it starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.validate import spec_problems
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.apply import EditsSource
from cdictk.startpath.specs.mountcheck import check_host_paths
from tests.owners import OTHER

pytestmark = pytest.mark.root


def edits(**blocks: Any) -> dict[str, Any]:
    return dict(blocks)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/libcuda.so.1").write_text("x")
    (tmp_path / "tmp").mkdir()
    os.chmod(tmp_path / "tmp", 0o1777)
    (tmp_path / "tmp/nvidia-mps").mkdir()
    return tmp_path


def mount(path: Path) -> dict[str, Any]:
    return {"hostPath": str(path), "containerPath": "/x", "options": ["ro"]}


def test_roots_paths_pass(host: Path) -> None:
    block = edits(mounts=[mount(host / "lib/libcuda.so.1"), mount(host / "tmp/nvidia-mps")])
    check_host_paths([EditsSource(block, "spec.yaml", "containerEdits")])


def test_a_mount_of_a_users_directory_is_one_line_naming_spec_field_and_owner(host: Path) -> None:
    os.chown(host / "tmp/nvidia-mps", OTHER, OTHER)
    block = edits(mounts=[mount(host / "lib/libcuda.so.1"), mount(host / "tmp/nvidia-mps")])
    with pytest.raises(CdictkError) as caught:
        check_host_paths([EditsSource(block, "/etc/cdi/nvidia.yaml", "containerEdits")])
    assert str(caught.value) == (
        f"/etc/cdi/nvidia.yaml: containerEdits.mounts[1]: {host}/tmp/nvidia-mps: owned by uid {OTHER}, "
        "not root or a system account (below 1000): refusing to give it to a container"
    )


def test_a_device_node_of_a_user_is_refused(host: Path) -> None:
    os.mknod(host / "nvidia0", 0o666 | 0o020000, os.makedev(195, 0))
    block = edits(deviceNodes=[{"path": "/dev/nvidia0", "hostPath": str(host / "nvidia0")}])
    check_host_paths([EditsSource(block, "s", "devices[0].containerEdits")])
    os.chown(host / "nvidia0", OTHER, OTHER)
    with pytest.raises(CdictkError, match=r"devices\[0\]\.containerEdits\.deviceNodes\[0\]: .*owned by uid"):
        check_host_paths([EditsSource(block, "s", "devices[0].containerEdits")])


def test_a_link_swapped_in_since_the_spec_was_written_is_not_followed(host: Path) -> None:
    """A system account (trusted to own its own directory) replaces its socket with a link to /etc."""
    (host / "run").mkdir()
    os.chown(host / "run", 120, 120)
    os.symlink("/etc", host / "run/socket")
    os.lchown(host / "run/socket", 120, 120)
    block = edits(mounts=[mount(host / "run/socket")])
    with pytest.raises(CdictkError, match=r"a symlink of uid 120, not root's"):
        check_host_paths([EditsSource(block, "s", "containerEdits")])


def test_a_source_missing_from_a_sticky_directory_stops_the_container(host: Path) -> None:
    """A reboot emptied /tmp: whoever makes the MPS directory first (a link to /etc) would pick what
    runc mounts. Before: missing, so passed, and runc followed what a user made meanwhile."""
    (host / "tmp/nvidia-mps").rmdir()
    block = edits(mounts=[mount(host / "lib/libcuda.so.1"), mount(host / "tmp/nvidia-mps")])
    with pytest.raises(CdictkError) as caught:
        check_host_paths([EditsSource(block, "/etc/cdi/nvidia.yaml", "containerEdits")])
    assert str(caught.value) == (
        f"/etc/cdi/nvidia.yaml: containerEdits.mounts[1]: {host}/tmp/nvidia-mps: missing in a directory "
        f"others can write ({host}/tmp, mode 1777): whoever makes it first picks what it is: refusing to "
        "give it to a container"
    )
    check_host_paths([EditsSource(edits(mounts=[mount(host / "lib/gone")]), "s", "c")])  # root's alone


def test_relative_sources_are_not_host_paths(host: Path) -> None:
    check_host_paths([EditsSource(edits(mounts=[{"hostPath": "tmpfs", "containerPath": "/t"}]), "s", "c")])


def test_validate_and_info_get_every_finding_of_a_spec(host: Path) -> None:
    os.chown(host / "tmp/nvidia-mps", OTHER, OTHER)
    spec = decode_spec(
        {
            "cdiVersion": "0.5.0",
            "kind": "example.com/x",
            "containerEdits": {"mounts": [mount(host / "tmp/nvidia-mps")]},
            "devices": [{"name": "a", "containerEdits": {"mounts": [mount(host / "lib/libcuda.so.1")]}}],
        },
        "x.yaml",
    )
    problems = spec_problems(spec, "x.yaml")
    assert [(p.file, p.field) for p in problems] == [("x.yaml", "containerEdits.mounts[0]")]
    assert "other runtimes mount it as root" in problems[0].reason


def test_a_hook_program_a_user_could_change_stops_the_container(host: Path) -> None:
    """The runtime runs a spec's hook as root: a hook a user could swap is their code as root on every
    start. Before: mounts and nodes were checked again, the hooks never."""
    (host / "bin").mkdir()
    hook = host / "bin/cdictk-hook"
    hook.write_text("#!/bin/sh\n")
    os.chmod(hook, 0o755)
    block = edits(hooks=[{"hookName": "createContainer", "path": str(hook)}])
    check_host_paths([EditsSource(block, "s", "containerEdits")])
    os.chmod(host / "bin", 0o777)
    with pytest.raises(CdictkError) as caught:
        check_host_paths([EditsSource(block, "/etc/cdi/nvidia.yaml", "containerEdits")])
    assert str(caught.value) == (
        f"/etc/cdi/nvidia.yaml: containerEdits.hooks[0]: {host}/bin: writable by group or others "
        "(mode 0777): refusing to run it as root"
    )
    os.chmod(host / "bin", 0o755)
    os.chown(hook, OTHER, OTHER)
    spec = decode_spec(
        {
            "cdiVersion": "0.5.0",
            "kind": "example.com/x",
            "devices": [
                {
                    "name": "a",
                    "containerEdits": {"hooks": [{"hookName": "createContainer", "path": str(hook)}]},
                }
            ],
        },
        "x.yaml",
    )
    problems = spec_problems(spec, "x.yaml")
    assert [(p.file, p.field) for p in problems] == [("x.yaml", "devices[0].containerEdits.hooks[0]")]
    assert (
        f"owned by uid {OTHER}" in problems[0].reason
        and "other runtimes run it as root" in problems[0].reason
    )


def test_a_system_account_may_own_a_mount_but_not_a_hook_program(host: Path) -> None:
    """A daemon's user (nvidia-persistenced) owns its socket, which is mounted; a program of its
    would run as root on every start, so hooks are root's only. Before: the mount rule for both."""
    system = 120
    (host / "bin").mkdir()
    hook = host / "bin/cdictk-hook"
    hook.write_text("#!/bin/sh\n")
    os.chmod(hook, 0o755)
    os.chown(hook, system, system)
    os.chown(host / "lib/libcuda.so.1", system, system)
    check_host_paths([EditsSource(edits(mounts=[mount(host / "lib/libcuda.so.1")]), "s", "containerEdits")])
    block = edits(hooks=[{"hookName": "createContainer", "path": str(hook)}])
    with pytest.raises(CdictkError) as caught:
        check_host_paths([EditsSource(block, "/etc/cdi/nvidia.yaml", "containerEdits")])
    assert str(caught.value) == (
        f"/etc/cdi/nvidia.yaml: containerEdits.hooks[0]: {hook}: owned by uid {system}, not root: "
        "refusing to run it as root"
    )
    spec = decode_spec(
        {"cdiVersion": "0.5.0", "kind": "example.com/x", "devices": [{"name": "a", "containerEdits": block}]},
        "x.yaml",
    )
    assert [p.field for p in spec_problems(spec, "x.yaml")] == ["devices[0].containerEdits.hooks[0]"]
