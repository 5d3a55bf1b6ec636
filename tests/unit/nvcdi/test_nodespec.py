"""The one way to a node's spec: every host path it names is root's alone.

The property is checked here with a walker of the test's own (not cdictk.startpath.helpers.hostpaths'), on the spec of
every fake-node preset in every GPU mode and of every platform node, each after a user planted what a
user can plant: the MPS pipe directory in a world-writable sticky /tmp (as a directory, and as a link
to /etc), a library or config file of theirs, a group-writable firmware directory, a device node of
theirs; and a system account's (uid below the login range) persistenced directory, which must stay.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.cdi.model import Spec
from cdictk.node.modes import Mode
from cdictk.nvcdi.nodespec import NodeSpec, node_spec
from cdictk.nvcdi.options import SpecOptions
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots
from tests.conftest import require_node_tools, roots_of
from tests.fakenode.node import PRESETS, FakeNode, build_node
from tests.fakenode.platforms import PLATFORMS, build_platform
from tests.owners import OTHER
from tests.rootmarker import root_only

pytestmark = pytest.mark.root

SYSTEM = 120  # a system account's uid, as nvidia-persistenced's on Debian
UID_MIN = 1000  # this machine's login.defs, as every Debian's


def is_roots_alone(path: str, depth: int = 0) -> str | None:
    """The test's own statement of item 1: why ``path`` is not root's alone, or None."""
    assert depth < 40, path
    parts = [part for part in path.split("/") if part]
    current = "/"
    for index, part in enumerate(parts):
        parent = os.lstat(current)
        current = os.path.join(current, part)
        st = os.lstat(current)
        leaf = index == len(parts) - 1
        if st.st_uid >= UID_MIN:
            return f"{current} is uid {st.st_uid}'s"
        if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
            return f"{os.path.dirname(current)} is writable by others"
        if stat.S_ISLNK(st.st_mode):
            target = os.path.join(os.path.dirname(current), os.readlink(current))
            rest = "/".join(parts[index + 1 :])
            return is_roots_alone(os.path.normpath(os.path.join(target, rest)), depth + 1)
        if leaf and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) and st.st_mode & 0o022:
            return f"{current} is writable by others"
    return None


def host_paths(spec: Spec) -> list[str]:
    paths = []
    for edits in [spec.container_edits, *(device.container_edits for device in spec.devices)]:
        paths += [node.host_path or node.path for node in edits.device_nodes]
        paths += [mount.host_path for mount in edits.mounts]
    return paths


def plant(root: str) -> list[str]:
    """What a user and a system account can leave on a node; the host paths that must be left out."""
    tmp = os.path.join(root, "tmp")
    os.makedirs(tmp, exist_ok=True)
    os.chmod(tmp, 0o1777)
    mps = os.path.join(tmp, "nvidia-mps")
    if os.path.isdir(mps):
        os.rmdir(mps)
    os.mkdir(mps)
    os.chown(mps, OTHER, OTHER)
    refused = [mps]
    persistenced = os.path.join(root, "run/nvidia-persistenced")
    if os.path.isdir(persistenced):
        os.chown(persistenced, SYSTEM, SYSTEM)  # Debian's: the daemon's own account, not root
    for config in ("usr/share/vulkan/icd.d/nvidia_icd.json", "etc/OpenCL/vendors/nvidia.icd"):
        path = os.path.join(root, config)
        if os.path.isfile(path):
            os.chown(path, OTHER, OTHER)
            refused.append(path)
            break
    for firmware in ("lib/firmware", "usr/lib/firmware"):
        path = os.path.realpath(os.path.join(root, firmware, "nvidia"))
        if os.path.isdir(path):
            os.chmod(path, 0o775)
            refused += [str(p) for p in Path(path).rglob("gsp*.bin")]
            break
    uvm_tools = os.path.join(root, "dev/nvidia-uvm-tools")
    if os.path.exists(uvm_tools):
        os.chown(uvm_tools, OTHER, OTHER)
        refused.append(uvm_tools)
    return refused


def generate(roots: Roots, mode: Mode) -> NodeSpec:
    return node_spec(roots, mode, SpecOptions())


CASES: list[tuple[str, Mode | None]] = [
    (preset, mode) for preset in PRESETS for mode in (Mode.AUTO, Mode.NVML, Mode.PROCFS, Mode.MANAGEMENT)
]
CASES += [(platform, None) for platform in PLATFORMS]


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m.value if m else 'own'}" for n, m in CASES])
def test_every_host_path_of_every_preset_and_mode_is_roots_alone(
    name: str, mode: Mode | None, tmp_path: Path, stub_cache: str
) -> None:
    require_node_tools()
    root = str(tmp_path / "node")
    if mode is not None:
        node = build_node(root, name, stub_cache)
        roots = Roots.from_options(node.root, None, node.proc, node.sys)
    else:
        platform = build_platform(root, name, stub_cache)
        roots, mode = (
            Roots.from_options(platform.root, None, platform.proc, platform.sys),
            Mode(platform.mode),
        )
    first = generate(roots, mode).spec
    before = host_paths(first)
    refused = [path for path in plant(root) if path in before or path.endswith("/tmp/nvidia-mps")]
    nodes = [node.host_path or node.path for node in first.devices[0].container_edits.device_nodes]
    if nodes and nodes[0].startswith(root) and nodes[0] not in refused:  # a device of a user's own
        os.chown(nodes[0], OTHER, OTHER)
        refused.append(nodes[0])
    try:
        made = generate(roots, mode)
    except CdictkError as exc:  # a mode whose only device was the planted node
        assert "left out" in str(exc) or "no devices" in str(exc)
        return
    paths = host_paths(made.spec)
    assert paths, "nothing left to check"
    for path in paths:
        assert is_roots_alone(path) is None, path
    for path in refused:
        assert path not in paths
        if path in before:
            assert any(line.startswith(path + ":") for line in made.warnings), (path, made.warnings)
    kept = [path for path in before if path not in refused]
    assert set(kept) - {p for p in kept if "/dev/" in p} <= set(paths)  # nothing else was lost
    if any(path.endswith("/run/nvidia-persistenced/socket") for path in before):
        assert any(path.endswith("/run/nvidia-persistenced/socket") for path in paths)  # a system account's


@pytest.fixture
@root_only
def node(tmp_path: Path, stub_cache: str) -> FakeNode:
    require_node_tools()
    made = build_node(str(tmp_path / "node"), "eight", stub_cache)
    os.chmod(made.root + "/tmp", 0o1777)
    return made


def mounts_of(made: NodeSpec) -> dict[str, list[str]]:
    return {mount.container_path: mount.options for mount in made.spec.container_edits.mounts}


def test_the_mps_directory_is_mounted_read_only_when_roots(node: FakeNode) -> None:
    made = generate(roots_of(node), Mode.AUTO)
    assert mounts_of(made)["/tmp/nvidia-mps"][0] == "ro"
    assert mounts_of(made)["/run/nvidia-persistenced/socket"][0] == "ro"


def test_a_users_mps_directory_is_left_out_with_one_line(node: FakeNode) -> None:
    mps = node.root + "/tmp/nvidia-mps"
    os.chown(mps, OTHER, OTHER)
    made = generate(roots_of(node), Mode.AUTO)
    assert "/tmp/nvidia-mps" not in mounts_of(made)
    assert [line for line in made.warnings if "nvidia-mps" in line] == [
        f"{mps}: owned by uid {OTHER}, not root or a system account (below {UID_MIN}); left out of the spec"
    ]


def test_a_users_link_in_place_of_the_mps_directory_never_becomes_a_host_path(node: FakeNode) -> None:
    """Planted before generate: the link's target (root's /etc) must not reach the spec either."""
    mps = node.root + "/tmp/nvidia-mps"
    os.rmdir(mps)
    os.makedirs(node.root + "/etc", exist_ok=True)
    os.symlink("/etc", mps)
    os.lchown(mps, OTHER, OTHER)
    made = generate(roots_of(node), Mode.AUTO)
    assert "/tmp/nvidia-mps" not in mounts_of(made)
    assert not [path for path in host_paths(made.spec) if path.rstrip("/").endswith("/etc")]
    assert any(line.startswith(f"{mps}: owned by uid {OTHER}") for line in made.warnings), made.warnings


def test_a_roots_link_to_the_mps_directory_is_followed(node: FakeNode) -> None:
    os.rename(node.root + "/tmp/nvidia-mps", node.root + "/tmp/mps-real")
    os.symlink("mps-real", node.root + "/tmp/nvidia-mps")
    assert mounts_of(generate(roots_of(node), Mode.AUTO))["/tmp/nvidia-mps"][0] == "ro"


def test_a_device_with_a_users_node_is_left_out_whole(node: FakeNode) -> None:
    os.chown(node.root + "/dev/nvidia3", OTHER, OTHER)
    made = generate(roots_of(node), Mode.AUTO)
    names = {device.name for device in made.spec.devices}
    assert "3" not in names and "2" in names and "all" not in names
    assert any(line.endswith("device 3 left out of the spec") for line in made.warnings), made.warnings
