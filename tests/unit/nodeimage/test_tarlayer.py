"""nodeimage/tarlayer.py: a tree's layer depends on what the tree holds and on nothing else (order of
creation, times after the epoch, the machine's user names), keeps modes, owners and hard links, and
refuses what an image must not carry."""

from __future__ import annotations

import gzip
import hashlib
import os
import socket
import stat
import tarfile
from pathlib import Path

import pytest

from nodeimage import ImageError
from nodeimage.tarlayer import Prune, entries, write_layer

EPOCH = 1_700_000_000


# The tree: path -> file content and mode, or a symlink's target ("->"), or a hard link's ("=>").
TREE: dict[str, tuple[str, bytes | str, int]] = {
    "usr/bin/tool": ("file", b"#!/bin/sh\necho tool\n", 0o4755),
    "usr/bin/tool-link": ("=>", "usr/bin/tool", 0),
    "usr/bin/alias": ("->", "tool", 0),
    "etc/secret": ("file", b"s3cret\n", 0o600),
    "etc/caf\N{LATIN SMALL LETTER E WITH ACUTE}": ("file", b"accent\n", 0o644),
    "etc/" + "x" * 120: ("file", b"long name\n", 0o644),
    "var/log/build.log": ("file", b"noise\n", 0o644),
}


def make_tree(root: Path, *, reverse: bool = False) -> Path:
    """The same tree each time; ``reverse`` creates its entries in the other order."""
    order = sorted(TREE, key=lambda name: TREE[name][0] == "=>", reverse=False)
    if reverse:
        order = [name for name in reversed(order) if TREE[name][0] != "=>"] + [
            name for name in order if TREE[name][0] == "=>"
        ]
    for name in order:
        kind, data, mode = TREE[name]
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            assert isinstance(data, bytes)
            path.write_bytes(data)
            path.chmod(mode)
        elif kind == "->":
            path.symlink_to(str(data))
        else:
            os.link(root / str(data), path)
    return root


def members(layer: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(layer, "r:gz") as tar:
        return tar.getmembers()


def test_the_same_tree_gives_the_same_bytes_whenever_and_however_it_was_made(tmp_path: Path) -> None:
    first = write_layer(make_tree(tmp_path / "a"), tmp_path / "a.tar.gz", epoch=EPOCH)
    second_tree = make_tree(tmp_path / "b", reverse=True)
    # Later times than the epoch are clamped to it, whatever they were.
    os.utime(second_tree / "etc" / "secret", (EPOCH + 5000, EPOCH + 5000))
    second = write_layer(second_tree, tmp_path / "b.tar.gz", epoch=EPOCH)
    assert first == second
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()


def test_what_the_tree_holds_changes_the_layer(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    before = write_layer(tree, tmp_path / "1.tar.gz", epoch=EPOCH)
    (tree / "etc" / "secret").chmod(0o640)
    after_mode = write_layer(tree, tmp_path / "2.tar.gz", epoch=EPOCH)
    (tree / "etc" / "secret").write_bytes(b"other\n")
    after_content = write_layer(tree, tmp_path / "3.tar.gz", epoch=EPOCH)
    assert len({before.diff_id, after_mode.diff_id, after_content.diff_id}) == 3


def test_digests_and_size_are_the_blobs_and_the_tars(tmp_path: Path) -> None:
    out = tmp_path / "layer.tar.gz"
    layer = write_layer(make_tree(tmp_path / "tree"), out, epoch=EPOCH)
    blob = out.read_bytes()
    assert layer.digest == f"sha256:{hashlib.sha256(blob).hexdigest()}"
    assert layer.diff_id == f"sha256:{hashlib.sha256(gzip.decompress(blob)).hexdigest()}"
    assert layer.size == len(blob)
    # gzip's header: no name flag, time 0.
    assert blob[3] == 0
    assert blob[4:8] == b"\0\0\0\0"


def test_entries_are_sorted_with_each_directory_before_what_it_holds(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar.gz"
    write_layer(make_tree(tmp_path / "tree"), layer, epoch=EPOCH)
    names = [member.name for member in members(layer)]
    assert names == [
        "etc",
        "etc/caf\N{LATIN SMALL LETTER E WITH ACUTE}",
        "etc/secret",
        "etc/" + "x" * 120,
        "usr",
        "usr/bin",
        "usr/bin/alias",
        "usr/bin/tool",
        "usr/bin/tool-link",
        "var",
        "var/log",
        "var/log/build.log",
    ]


def test_modes_owners_links_and_times_are_kept_and_nothing_else(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    old = EPOCH - 86400
    os.utime(tree / "etc" / "secret", (old, old))
    layer = tmp_path / "layer.tar.gz"
    write_layer(tree, layer, epoch=EPOCH)
    found = {member.name: member for member in members(layer)}
    owner = os.stat(tree / "etc" / "secret")
    for member in found.values():
        assert (member.uid, member.gid) == (owner.st_uid, owner.st_gid)
        assert member.uname == member.gname == ""
        assert not any(key.startswith("SCHILY.xattr") for key in member.pax_headers)
    assert found["usr/bin/tool"].mode == 0o4755
    assert found["usr/bin/tool"].isreg()
    assert found["etc/secret"].mode == 0o600
    assert found["usr/bin/tool-link"].islnk()
    assert found["usr/bin/tool-link"].linkname == "usr/bin/tool"
    assert found["usr/bin/alias"].issym()
    assert found["usr/bin/alias"].linkname == "tool"
    assert found["usr"].isdir()
    # An older time stays (Debian's bytecode checks its source's); a newer one is the epoch.
    assert found["etc/secret"].mtime == old
    assert found["usr/bin/tool"].mtime == EPOCH


def test_prune_keeps_emptied_directories_and_drops_omitted_paths(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    prune = Prune(emptied=frozenset({"var/log"}), omitted=frozenset({"etc/secret", "usr/bin"}))
    names = [name for name, _ in entries(tree, prune)]
    assert "var/log" in names
    assert "var/log/build.log" not in names
    assert not [name for name in names if name == "etc/secret" or name.startswith("usr/bin")]
    assert "usr" in names


def test_a_fifo_or_a_socket_is_refused(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    os.mkfifo(tree / "etc" / "pipe")
    with pytest.raises(ImageError, match=r"/etc/pipe is a FIFO: an image layer carries none"):
        write_layer(tree, tmp_path / "layer.tar.gz", epoch=EPOCH)
    os.unlink(tree / "etc" / "pipe")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tree / "etc" / "sock"))
        with pytest.raises(ImageError, match=r"/etc/sock is a socket"):
            write_layer(tree, tmp_path / "layer.tar.gz", epoch=EPOCH)


@pytest.mark.root
def test_a_device_node_is_refused_overlayfs_whiteouts_included(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    os.mknod(tree / "etc" / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    with pytest.raises(ImageError, match=r"/etc/whiteout is a character device"):
        write_layer(tree, tmp_path / "layer.tar.gz", epoch=EPOCH)


def test_a_top_directory_holds_the_tree_and_its_links(tmp_path: Path) -> None:
    """A release tarball's one directory: the tree's root under that name, first, the rest below it."""
    tree = make_tree(tmp_path / "tree")
    os.utime(tree, (EPOCH + 10, EPOCH + 10))
    layer = tmp_path / "layer.tar.gz"
    write_layer(tree, layer, epoch=EPOCH, top="tool-1.0", level=9)
    found = members(layer)
    assert found[0].name == "tool-1.0" and found[0].isdir() and found[0].mtime == EPOCH
    assert all(member.name.startswith("tool-1.0/") for member in found[1:])
    assert [member.name.removeprefix("tool-1.0/") for member in found[1:]] == [
        member.name for member in members(write_tree(tree, tmp_path / "plain.tar.gz"))
    ]
    link = next(member for member in found if member.name == "tool-1.0/usr/bin/tool-link")
    assert link.islnk() and link.linkname == "tool-1.0/usr/bin/tool"


def write_tree(tree: Path, out: Path) -> Path:
    write_layer(tree, out, epoch=EPOCH)
    return out
