"""cdictk.startpath.helpers.hostpaths: whether a host path a spec mounts is root's alone."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from cdictk.startpath.helpers.hostpaths import DEFAULT_UID_MIN, HostPathCheck, login_uid_min
from tests.owners import OTHER

SYSTEM = 120

pytestmark = pytest.mark.root


@pytest.fixture
def base(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    return tmp_path


def check(path: Path | str, *, root_links: bool = False) -> str | None:
    return HostPathCheck(uid_min=1000, root_links=root_links).problem(str(path))


def test_roots_files_pass_and_missing_ones_only_where_no_one_else_could_make_them(base: Path) -> None:
    (base / "lib").mkdir()
    (base / "lib/libcuda.so.1").write_text("x")
    assert check(base / "lib/libcuda.so.1") is None
    assert check(base / "lib/gone") is None
    assert check(base / "lib/gone/deeper") is None
    assert check(base / "lib/libcuda.so.1/x") is None  # under a file: nothing can be made there


def test_a_missing_name_in_a_sticky_directory_is_a_problem(base: Path) -> None:
    """After a reboot empties /tmp a spec still names /tmp/nvidia-mps: a user who makes it first (a
    link to /etc) picks what the runtime mounts. Before: missing, so not judged, so passed."""
    (base / "tmp").mkdir()
    os.chmod(base / "tmp", 0o1777)
    why = (
        f"{base}/tmp/nvidia-mps: missing in a directory others can write ({base}/tmp, mode 1777): "
        "whoever makes it first picks what it is"
    )
    assert check(base / "tmp/nvidia-mps") == why
    assert check(base / "tmp/nvidia-mps", root_links=True) == why
    assert check(base / "tmp/nvidia-mps/control") == why
    (base / "tmp/nvidia-mps").mkdir()  # root's again: its own missing names only root could make
    assert check(base / "tmp/nvidia-mps/control") is None


def test_a_users_entry_anywhere_on_the_way_is_named_with_its_owner(base: Path) -> None:
    (base / "d/e").mkdir(parents=True)
    (base / "d/e/f").write_text("x")
    os.chown(base / "d", OTHER, OTHER)
    problem = check(base / "d/e/f")
    assert problem == f"{base}/d: owned by uid {OTHER}, not root or a system account (below 1000)"


def test_a_system_accounts_directory_passes(base: Path) -> None:
    (base / "run/nvidia-persistenced").mkdir(parents=True)
    os.chown(base / "run/nvidia-persistenced", SYSTEM, SYSTEM)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(base / "run/nvidia-persistenced/socket"))
    os.chown(base / "run/nvidia-persistenced/socket", SYSTEM, SYSTEM)
    assert check(base / "run/nvidia-persistenced/socket") is None


@pytest.mark.parametrize(
    ("text", "uid_min"),
    [
        ("  UID_MIN 2000\n", 2000),  # indented: shadow skips the blanks; before, the line was skipped
        ("\tUID_MIN\t2000  \n", 2000),
        ('UID_MIN "2000"\n', 2000),
        ("UID_MIN 0x7d0\n", 2000),  # strtoul, base 0
        ("UID_MIN 03720\n", 2000),  # octal: before, 3720, trusting uids 2000-3719
        ("UID_MIN 2000\nUID_MIN 3000\n", 3000),  # the last wins
        ("UID_MIN 2000\nUID_MIN 12abc\n", DEFAULT_UID_MIN),  # the last, not a number: shadow's default
        ("UID_MIN \u0663\u0660\u0660\u0660\n", DEFAULT_UID_MIN),  # digits to Python, not to strtoul
        ("# UID_MIN 500\nUID_MINIMUM 500\nSYS_UID_MIN 500\n", DEFAULT_UID_MIN),
        ("UID_MIN\n", DEFAULT_UID_MIN),
    ],
)
def test_uid_min_is_read_as_shadow_utils_reads_it(base: Path, text: str, uid_min: int) -> None:
    defs = base / "login.defs"
    defs.write_text(text)
    assert login_uid_min(str(defs)) == uid_min


def test_the_login_range_comes_from_login_defs(base: Path) -> None:
    defs = base / "login.defs"
    defs.write_text("# comment\nUID_MIN\t\t 500\nUID_MAX 60000\n")
    assert login_uid_min(str(defs)) == 500
    assert login_uid_min(str(base / "none")) == DEFAULT_UID_MIN
    (base / "f").write_text("x")
    os.chown(base / "f", 700, 700)
    assert HostPathCheck(login_defs=str(defs)).problem(str(base / "f")) is not None
    assert HostPathCheck(uid_min=1000).problem(str(base / "f")) is None


def test_a_writable_directory_on_the_way_is_refused_a_sticky_one_only_for_others_entries(base: Path) -> None:
    (base / "open/x").mkdir(parents=True)
    os.chmod(base / "open", 0o777)
    assert check(base / "open/x") == f"{base}/open: writable by group or others (mode 0777)"
    os.chmod(base / "open", 0o1777)
    assert check(base / "open/x") is None  # root's entry in a sticky directory: only root may swap it
    os.chown(base / "open/x", OTHER, OTHER)
    assert "owned by uid" in (check(base / "open/x") or "")
    assert check(base / "open") == f"{base}/open: writable by group or others (mode 1777)"  # mounted itself


def test_the_mode_of_a_mounted_file_counts_not_of_a_socket_or_device(base: Path) -> None:
    (base / "f").write_text("x")
    os.chmod(base / "f", 0o666)
    assert "writable by group or others" in (check(base / "f") or "")
    os.mknod(base / "dev", 0o666 | 0o020000, os.makedev(1, 3))
    assert check(base / "dev") is None
    os.mkfifo(base / "fifo", 0o666)
    assert check(base / "fifo") is None


def test_links_are_judged_and_followed(base: Path) -> None:
    (base / "real").mkdir()
    (base / "users").mkdir()
    os.chown(base / "users", OTHER, OTHER)
    os.symlink("real", base / "roots-link")
    assert check(base / "roots-link") is None
    os.symlink(str(base / "users"), base / "to-users")
    assert (
        check(base / "to-users")
        == f"{base}/users: owned by uid {OTHER}, not root or a system account (below 1000)"
    )
    os.symlink("real", base / "users-link")
    os.lchown(base / "users-link", OTHER, OTHER)
    assert "users-link: owned by uid" in (check(base / "users-link") or "")
    os.symlink("loop", base / "loop")
    assert "too many levels" in (check(base / "loop") or "")


def test_at_container_start_only_roots_links_are_followed(base: Path) -> None:
    (base / "real").mkdir()
    os.symlink("real", base / "system-link")
    os.lchown(base / "system-link", SYSTEM, SYSTEM)
    assert check(base / "system-link") is None
    assert "not root's" in (check(base / "system-link", root_links=True) or "")
    os.symlink("real", base / "roots-link")
    assert check(base / "roots-link", root_links=True) is None


def test_a_link_itself_without_following_it(base: Path) -> None:
    (base / "tmp").mkdir()
    os.chmod(base / "tmp", 0o1777)
    os.symlink("/etc", base / "tmp/nvidia-mps")
    assert HostPathCheck(uid_min=1000).problem(str(base / "tmp/nvidia-mps"), follow=False) is None
    os.lchown(base / "tmp/nvidia-mps", OTHER, OTHER)
    assert "owned by uid" in (
        HostPathCheck(uid_min=1000).problem(str(base / "tmp/nvidia-mps"), follow=False) or ""
    )


def test_relative_paths_are_refused() -> None:
    assert check("lib/x") == "lib/x: not an absolute path"
