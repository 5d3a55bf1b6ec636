"""The one walk of ld.so.conf: the directories in ldconfig's order, what the writer must leave to
ldconfig, and what is refused outright, on small trees (no root needed)."""

from __future__ import annotations

import fnmatch
import os
import re
import socket
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import ldconf


def read(root: Path, *, hwcap_lines: bool = False) -> ldconf.Conf:
    with Rootfs(str(root)) as rootfs:
        return ldconf.read(rootfs, "/etc/ld.so.conf", hwcap_lines=hwcap_lines)


def write(root: Path, path: str, text: str | bytes) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        target.write_bytes(text)
    else:
        target.write_text(text)


def test_directories_come_in_ldconfigs_order_through_includes(tmp_path: Path) -> None:
    write(
        tmp_path, "/etc/ld.so.conf", "/first\ninclude /etc/ld.so.conf.d/*.conf\n/last/ # after the includes\n"
    )
    write(tmp_path, "/etc/ld.so.conf.d/b.conf", "/b\n\tinclude  sub/*.conf other.conf # relative to here\n")
    write(tmp_path, "/etc/ld.so.conf.d/a.conf", "  /a  \n#/commented\n\n")
    write(tmp_path, "/etc/ld.so.conf.d/sub/x.conf", "/x\n")
    write(tmp_path, "/etc/ld.so.conf.d/other.conf", "/other\n")  # also matched by *.conf: read once
    write(tmp_path, "/etc/ld.so.conf.d/.hidden.conf", "/hidden\n")  # '*' does not match a leading '.'
    write(tmp_path, "/etc/ld.so.conf.d/c.conf.bak", "/bak\n")
    conf = read(tmp_path)
    # Lines as written: add_dir strips the trailing blanks and slashes.
    assert conf.dirs == ["/first", "/a  ", "/b", "/x", "/other", "/last/ "]
    assert conf.unsupported is None


def test_lines_are_cut_at_a_nul_byte_as_c_strings_are(tmp_path: Path) -> None:
    write(tmp_path, "/etc/ld.so.conf", b"/lib/a\0/ignored\n/lib/b#x\0y\ninclude /etc/x\0.conf\n")
    write(tmp_path, "/etc/x", "/from/x\n")
    assert read(tmp_path).dirs == ["/lib/a", "/lib/b", "/from/x"]


def test_hwcap_lines_are_ignored_or_left_to_ldconfig(tmp_path: Path) -> None:
    write(tmp_path, "/etc/ld.so.conf", "hwcap 1 nosegneg\nHWCAP\t2 x\nhwcaps/not-a-keyword\n/lib\n")
    assert read(tmp_path).dirs == ["hwcaps/not-a-keyword", "/lib"]
    assert read(tmp_path).unsupported is None
    # glibc 2.31 and older give them a meaning: hwcap subdirectory names.
    assert read(tmp_path, hwcap_lines=True).unsupported == "/etc/ld.so.conf: a hwcap line (hwcap 1 nosegneg)"


def test_an_include_cycle_is_left_to_ldconfig_and_the_walk_ends(tmp_path: Path) -> None:
    write(tmp_path, "/etc/ld.so.conf", "/a\ninclude /etc/b.conf\n/c\n")
    write(tmp_path, "/etc/b.conf", "/b\ninclude /etc/ld.so.conf\n")
    conf = read(tmp_path)
    assert conf.dirs == ["/a", "/b", "/c"]
    assert conf.unsupported == "/etc/ld.so.conf includes itself"


@pytest.mark.parametrize(
    "pattern", ["/etc/*/x.conf", "/etc/[ab].conf", "/etc/x\\*.conf", "/e?c/x.conf", "rel/*/x.conf"]
)
def test_patterns_the_walk_does_not_expand_are_left_to_ldconfig(tmp_path: Path, pattern: str) -> None:
    write(tmp_path, "/etc/ld.so.conf", f"include {pattern}\n")
    unsupported = read(tmp_path).unsupported
    assert unsupported is not None and unsupported.startswith("/etc/ld.so.conf: include pattern")


def test_what_cannot_be_read_is_skipped_as_ldconfig_skips_it(tmp_path: Path) -> None:
    write(tmp_path, "/etc/ld.so.conf", "include /missing.conf /etc/dir.conf /etc/dangling.conf\n/lib\n")
    (tmp_path / "etc/dir.conf").mkdir()
    (tmp_path / "etc/dangling.conf").symlink_to("/nowhere")
    conf = read(tmp_path)
    assert conf.dirs == ["/lib"] and conf.unsupported is None
    # No ld.so.conf at all: nothing, and nothing to leave to ldconfig.
    (tmp_path / "etc/ld.so.conf").unlink()
    assert read(tmp_path).dirs == []


def test_a_file_too_large_to_walk_is_left_to_ldconfig(tmp_path: Path) -> None:
    write(tmp_path, "/etc/ld.so.conf", "/lib\n" + "#" * ldconf.MAX_SIZE)
    assert read(tmp_path).unsupported == "/etc/ld.so.conf: larger than 65536 bytes"


def test_the_caps_end_a_walk_that_multiplies(tmp_path: Path) -> None:
    # Each file includes the next twice: ldconfig would read 2**40 files.
    for index in range(40):
        write(
            tmp_path,
            f"/etc/c{index}.conf",
            f"/d{index}\ninclude /etc/c{index + 1}.conf /etc/c{index + 1}.conf\n",
        )
    write(tmp_path, "/etc/ld.so.conf", "include /etc/c0.conf\n")
    conf = read(tmp_path)
    assert conf.dirs == [f"/d{index}" for index in range(40)]  # each file once
    many = "".join(f"/lib{index}\n" for index in range(ldconf.BUDGET))
    write(tmp_path, "/etc/ld.so.conf", many)
    conf = read(tmp_path)
    assert conf.unsupported is not None and "more than" in conf.unsupported
    assert len(conf.dirs) < ldconf.BUDGET


def test_a_link_out_of_the_rootfs_is_read_inside_it(tmp_path: Path) -> None:
    host = tmp_path / "host.conf"
    host.write_text("/host/only\n")
    root = tmp_path / "root"
    write(root, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d").mkdir()
    (root / "etc/ld.so.conf.d/x.conf").symlink_to(host)  # absolute: means <rootfs><host>
    write(root, str(host), "/image/own\n")
    assert read(root).dirs == ["/image/own"]


def _make_special(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


@pytest.mark.parametrize(("kind", "word"), [("fifo", "a FIFO"), ("socket", "a socket")])
def test_a_fifo_or_socket_is_refused_wherever_an_include_finds_it(
    tmp_path: Path, kind: str, word: str
) -> None:
    write(tmp_path, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    _make_special(tmp_path / "etc/ld.so.conf.d/50-image.conf", kind)
    message = f"/etc/ld.so.conf.d/50-image.conf in the container is {word}, not a regular file (included by /etc/ld.so.conf)"
    with pytest.raises(HookError, match=f"^{re.escape(message)}$"):
        read(tmp_path)


def test_an_ld_so_conf_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "etc/ld.so.conf").mkdir(parents=True)
    with pytest.raises(
        HookError, match=r"^/etc/ld\.so\.conf in the container is a directory, not a regular file$"
    ):
        read(tmp_path)


NAMES = ["a.conf", ".a.conf", "a.conf.bak", "conf", "abcbc", "abc", "a", "", "x*y", "é.conf"]
PATTERNS = ["*.conf", ".*", "*", "?", "a?", "a*b*c", "*bc", "*a*", "??*", "x*y", "a", "*.*"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_wildcards_match_as_glob_matches_them(pattern: str) -> None:
    for name in NAMES:
        expected = fnmatch.fnmatchcase(name, pattern) and not (
            name.startswith(".") and not pattern.startswith(".")
        )
        assert ldconf.matches(name, pattern) == expected, (name, pattern)
