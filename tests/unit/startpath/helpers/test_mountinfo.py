"""mountinfo: the one parser of /proc/<pid>/mountinfo, for the ldconfig sandbox and the prestart hook."""

from __future__ import annotations

import os

import pytest

from cdictk.startpath.helpers import mountinfo


def test_mountinfo_fields_escapes_and_optional_fields() -> None:
    data = (
        b"36 31 0:33 / /sys/fs/cgroup/devices rw,nosuid shared:17 master:2 - cgroup cgroup rw,devices\n"
        b"41 31 0:38 /docker/abc /mnt/with\\040space\\134 rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    first, second = mountinfo.parse(data)
    assert (first.dev, first.root, first.mountpoint, first.fstype, first.super_options) == (
        os.makedev(0, 33),
        "/",
        "/sys/fs/cgroup/devices",
        "cgroup",
        "rw,devices",
    )
    assert (second.root, second.mountpoint, second.fstype) == ("/docker/abc", "/mnt/with space\\", "cgroup2")


@pytest.mark.parametrize(
    "line", [b"36 31 0:33 / /x rw - cgroup\n", b"36 31 zero / /x rw - a b c\n", b"1 2\n"]
)
def test_mountinfo_garbage_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError, match="mountinfo: unexpected line"):
        mountinfo.parse(line)


def test_read_caps_the_size(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mountinfo, "MAX_MOUNTINFO", 10)
    fd = os.open("/proc/self/mountinfo", os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="mountinfo: larger than 10 bytes"):
            mountinfo.read(fd)
    finally:
        os.close(fd)


def test_read_gives_this_process_mounts() -> None:
    fd = os.open("/proc/self/mountinfo", os.O_RDONLY)
    try:
        mounts = mountinfo.read(fd)
    finally:
        os.close(fd)
    assert "/" in [mount.mountpoint for mount in mounts]
