"""Device nodes made in a rootfs the image controls: modes, owners, what is replaced, what is refused.

A temporary directory stands in for the rootfs; making nodes needs root (CAP_MKNOD).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.prestart.nodes import make_nodes

pytestmark = pytest.mark.root

GPU0: dict[str, Any] = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}


def make(root: Path, *nodes: dict[str, Any]) -> list[str]:
    with Rootfs(str(root)) as rootfs:
        return make_nodes(rootfs, list(nodes))


def assert_char(path: Path, major: int, minor: int, mode: int) -> os.stat_result:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode), oct(st.st_mode)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor)
    assert stat.S_IMODE(st.st_mode) == mode, oct(st.st_mode)
    return st


def test_a_char_node_gets_the_default_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        assert make(tmp_path, GPU0) == ["/dev/nvidia0"]
        assert os.umask(0o077) == 0o077  # and it put the umask back
    finally:
        os.umask(old)
    assert_char(tmp_path / "dev" / "nvidia0", 195, 0, 0o666)


def test_the_specs_mode_owner_and_group_are_applied(tmp_path: Path) -> None:
    node = dict(GPU0, path="/dev/dri/card1", major=226, minor=1, fileMode=0o640, uid=1234, gid=44)
    assert make(tmp_path, node) == ["/dev/dri/card1"]
    st = assert_char(tmp_path / "dev" / "dri" / "card1", 226, 1, 0o640)
    assert (st.st_uid, st.st_gid) == (1234, 44)  # and /dev and /dev/dri were made, the image had neither


def test_a_block_node_and_a_fifo(tmp_path: Path) -> None:
    made = make(
        tmp_path,
        {"path": "/dev/sdz", "type": "b", "major": 8, "minor": 240},
        {"path": "/dev/pipe", "type": "p", "fileMode": 0o600},
    )
    assert made == ["/dev/sdz", "/dev/pipe"]
    assert stat.S_ISBLK(os.lstat(tmp_path / "dev" / "sdz").st_mode)
    fifo = os.lstat(tmp_path / "dev" / "pipe")
    assert stat.S_ISFIFO(fifo.st_mode) and stat.S_IMODE(fifo.st_mode) == 0o600


def test_an_identical_node_is_kept(tmp_path: Path) -> None:
    assert make(tmp_path, GPU0) == ["/dev/nvidia0"]
    before = os.lstat(tmp_path / "dev" / "nvidia0")
    assert make(tmp_path, GPU0) == []
    assert os.lstat(tmp_path / "dev" / "nvidia0").st_ino == before.st_ino


def test_another_node_or_a_file_at_the_path_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev" / "nvidia0", 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    (tmp_path / "dev" / "nvidiactl").write_text("image file\n")
    ctl = dict(GPU0, path="/dev/nvidiactl", minor=255)
    assert make(tmp_path, GPU0, ctl) == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert_char(tmp_path / "dev" / "nvidia0", 195, 0, 0o666)
    assert_char(tmp_path / "dev" / "nvidiactl", 195, 255, 0o666)


def test_an_image_symlink_at_the_node_is_replaced_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "dev").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    victim.chmod(0o600)
    (root / "dev" / "nvidia0").symlink_to(victim)
    assert make(root, GPU0) == ["/dev/nvidia0"]
    assert_char(root / "dev" / "nvidia0", 195, 0, 0o666)
    assert victim.read_text() == "keep\n"
    st = os.lstat(victim)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_an_image_dev_linked_outside_gets_the_node_inside_the_rootfs(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    outside = tmp_path / "host-dev"
    outside.mkdir()
    (root / "dev").symlink_to(outside)  # absolute: resolved in the root, it names root/<outside>
    assert make(root, GPU0) == ["/dev/nvidia0"]
    assert os.listdir(outside) == []
    assert_char(root / str(outside).lstrip("/") / "nvidia0", 195, 0, 0o666)


def test_an_image_dev_linked_upwards_stays_in_the_rootfs(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    (root / "dev").symlink_to("../../..")  # ".." never climbs above the root
    assert make(root, GPU0) == ["/dev/nvidia0"]
    assert_char(root / "nvidia0", 195, 0, 0o666)
    assert not (tmp_path / "nvidia0").exists() and not Path("/nvidia0").exists()


def test_a_directory_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dev" / "nvidia0").mkdir(parents=True)
    with pytest.raises(HookError, match="a directory is in the way") as info:
        make(tmp_path, GPU0)
    assert "\n" not in str(info.value)
    assert (tmp_path / "dev" / "nvidia0").is_dir()


@pytest.mark.parametrize(
    ("node", "words"),
    [
        ({"path": "dev/nvidia0", "type": "c", "major": 195}, "needs an absolute path"),
        ({"type": "c", "major": 195}, "needs an absolute path"),
        ({"path": "/dev/nvidia0", "type": "x", "major": 195}, "a type of c, b or p"),
        ({"path": "/dev/nvidia0", "major": 195}, "a type of c, b or p"),
        ({"path": "/dev/nvidia0", "type": "c", "major": -1}, "bad major or minor"),
        ({"path": "/dev/nvidia0", "type": "c", "major": True}, "bad major or minor"),
        ({"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": "0"}, "bad major or minor"),
        ({"path": "/dev/nvidia0", "type": "c", "major": 195, "fileMode": 0o10000}, "bad fileMode"),
        ({"path": "/dev/nvidia0", "type": "c", "major": 195, "fileMode": -1}, "bad fileMode"),
        ({"path": "/dev/nvidia0", "type": "c", "major": 195, "fileMode": "0666"}, "bad fileMode"),
        ({"path": "/dev/nvidia0", "type": "c", "major": 195, "fileMode": True}, "bad fileMode"),
        ({"path": "/dev/..", "type": "c", "major": 195}, "not a file name"),
        ({"path": "/", "type": "c", "major": 195}, "not a file name"),
    ],
)
def test_bad_entries_are_one_line_errors(tmp_path: Path, node: dict[str, Any], words: str) -> None:
    with pytest.raises(HookError, match=words) as info:
        make(tmp_path, node)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "dev").exists()  # refused before anything was made


def test_nodes_before_a_bad_one_are_made_and_reported_by_the_error(tmp_path: Path) -> None:
    with pytest.raises(HookError, match="bad major"):
        make(tmp_path, GPU0, dict(GPU0, path="/dev/nvidia1", major=-5))
    assert_char(tmp_path / "dev" / "nvidia0", 195, 0, 0o666)
    assert not (tmp_path / "dev" / "nvidia1").exists()
