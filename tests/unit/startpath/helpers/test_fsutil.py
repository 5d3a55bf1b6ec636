import fcntl
import os
import stat
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import (
    atomic_write,
    check_directory,
    make_dirs,
    read_capped,
    sweep_temps,
    sweep_temps_of,
    writable_directory,
)
from tests.owners import OTHER


def test_new_file_gets_the_given_mode(tmp_path: Path) -> None:
    target = tmp_path / "spec.yaml"
    atomic_write(str(target), b"data", mode=0o600)
    assert target.read_bytes() == b"data"
    assert target.stat().st_mode & 0o7777 == 0o600
    atomic_write(str(tmp_path / "default"), b"x")
    assert (tmp_path / "default").stat().st_mode & 0o7777 == 0o644


def test_replacing_keeps_mode_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_text("old")
    target.chmod(0o640)
    inode = target.stat().st_ino
    atomic_write(str(target), b"new" * 100000)
    assert target.read_bytes() == b"new" * 100000
    assert target.stat().st_mode & 0o7777 == 0o640
    assert target.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert os.listdir(tmp_path) == ["config.json"]


def test_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CdictkError, match="is a symlink; refusing to replace it"):
        atomic_write(str(tmp_path / "link"), b"x")
    assert (tmp_path / "real").read_text() == "keep"
    assert (tmp_path / "link").is_symlink()


def test_directory_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match="not a regular file"):
        atomic_write(str(tmp_path), b"x")


def test_missing_directory(tmp_path: Path) -> None:
    """Said by the check, not left to the write: before, check_directory passed a missing directory
    and a user who made it (in /tmp) before the write got root's file in their directory."""
    with pytest.raises(CdictkError, match=r"/none: not written: No such file or directory$"):
        check_directory(str(tmp_path / "none"))
    with pytest.raises(CdictkError, match=r"/none: not written: No such file or directory$"):
        atomic_write(str(tmp_path / "none" / "f"), b"x")
    (tmp_path / "file").write_text("")
    with pytest.raises(CdictkError, match=r"/file: not written: not a directory$"):
        check_directory(str(tmp_path / "file"))
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    with pytest.raises(CdictkError, match=r"/dangling: not written: No such file or directory$"):
        writable_directory(str(tmp_path / "dangling"))


def test_failed_rename_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "config.json"
    target.write_text("old")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(CdictkError, match=r"config\.json: cannot write: No space left on device"):
        atomic_write(str(target), b"new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["config.json"]


def test_keep_mode_false_sets_the_given_mode(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("old")
    os.chmod(path, 0o600)
    atomic_write(str(path), b"new", mode=0o644, keep_mode=False)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.root
def test_a_file_written_with_its_own_mode_belongs_to_the_writer(tmp_path: Path) -> None:
    """A spec (hooks run as root) must not go to whoever planted the file it replaces."""
    path = tmp_path / "nvidia.yaml"
    path.write_text("planted")
    os.chown(path, 65534, 65534)
    atomic_write(str(path), b"spec", mode=0o644, keep_mode=False)
    assert (path.stat().st_uid, path.stat().st_gid) == (0, 0)
    os.chown(path, 65534, 65534)
    atomic_write(str(path), b"config", keep_mode=True)  # an edited config keeps its owner
    assert path.stat().st_uid == 65534


def test_read_capped(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_capped(str(path), 10) == b"x" * 10
    with pytest.raises(CdictkError, match="file is 10 bytes, over the 9-byte limit"):
        read_capped(str(path), 9)
    with pytest.raises(CdictkError, match="No such file or directory"):
        read_capped(str(tmp_path / "missing"), 10)
    with pytest.raises(CdictkError, match="not a regular file"):
        read_capped(str(tmp_path), 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(CdictkError, match="not a regular file"):
        read_capped(str(tmp_path / "fifo"), 10)


def test_read_capped_stops_at_the_cap_for_files_without_a_size() -> None:
    # /proc files report size 0 but have content: the cap still applies while reading.
    with pytest.raises(CdictkError, match="over the 4-byte limit"):
        read_capped("/proc/self/status", 4)


def modes(top: Path, *names: str) -> list[int]:
    return [stat.S_IMODE((top / name).stat().st_mode) for name in names]


@pytest.mark.usefixtures("umask_000")
def test_make_dirs_gives_every_directory_it_creates_the_mode_under_umask_000(tmp_path: Path) -> None:
    make_dirs(str(tmp_path / "a" / "b" / "c"))
    assert modes(tmp_path, "a", "a/b", "a/b/c") == [0o755, 0o755, 0o755]
    make_dirs(str(tmp_path / "private" / "cache"), 0o700)
    assert modes(tmp_path, "private", "private/cache") == [0o700, 0o700]


def test_make_dirs_sets_the_mode_a_strict_umask_would_narrow(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        make_dirs(str(tmp_path / "a" / "b"))
    finally:
        os.umask(old)
    assert modes(tmp_path, "a", "a/b") == [0o755, 0o755]


def test_make_dirs_leaves_what_exists_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir(mode=0o777)
    (tmp_path / "shared").chmod(0o1777)
    (tmp_path / "link").symlink_to(tmp_path / "shared")  # an existing link to a directory is used
    make_dirs(str(tmp_path / "link" / "new"))
    make_dirs(str(tmp_path / "link" / "new"))  # and again: nothing to do
    assert modes(tmp_path, "shared", "shared/new") == [0o1777, 0o755]


@pytest.mark.parametrize("in_the_way", ["file", "dangling link"])
def test_make_dirs_refuses_what_is_not_a_directory(tmp_path: Path, in_the_way: str) -> None:
    blocker = tmp_path / "a"
    if in_the_way == "file":
        blocker.write_text("")
    else:
        blocker.symlink_to(tmp_path / "nowhere")
    for path in (blocker, blocker / "b"):
        with pytest.raises(FileExistsError):
            make_dirs(str(path))
    assert not (tmp_path / "nowhere").exists()


def test_make_dirs_never_chmods_through_a_link_swapped_in_for_what_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    real_mkdir = os.mkdir

    def mkdir_then_swap(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.rmdir(name, dir_fd=dir_fd)
        os.symlink(victim, name, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    with pytest.raises(OSError):
        make_dirs(str(tmp_path / "made"))
    assert modes(tmp_path, "victim") == [0o700]


def temp_of(path: Path, token: str) -> Path:
    return path.with_name(f".{path.name}.{token}.tmp")


def test_a_sweeping_write_removes_a_dead_writers_temp_files_and_keeps_a_live_ones(tmp_path: Path) -> None:
    target = tmp_path / "nvidia.yaml"
    stale = temp_of(target, "0123456789ab")  # left by a writer killed mid-write: nobody holds its lock
    live = temp_of(target, "ba9876543210")  # a concurrent writer's, locked while it writes
    others = [
        temp_of(target, "backup"),  # not a name atomic_write makes
        temp_of(tmp_path / "other.yaml", "0123456789ab"),  # another file's
    ]
    for path in (stale, live, *others):
        path.write_text("half")
    with live.open("rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        atomic_write(str(target), b"spec", sweep=True)
        assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in (target, live, *others))
    atomic_write(str(target), b"spec", sweep=False)  # the shim's way: no sweep
    assert live.exists()


def test_a_sweeping_writers_temp_file_survives_another_writers_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "nvidia.yaml"
    real_fsync = os.fsync

    def fsync_while_another_run_sweeps(fd: int) -> None:
        sweep_temps(str(target))  # a second `cdi generate` starting while we write
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_while_another_run_sweeps)
    atomic_write(str(target), b"spec", sweep=True)
    assert target.read_bytes() == b"spec"
    assert os.listdir(tmp_path) == ["nvidia.yaml"]


def test_a_temp_file_swept_before_its_writer_locked_it_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "nvidia.yaml"
    real_open = os.open
    swept: list[str] = []

    def open_then_sweep(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if flags & os.O_CREAT and not swept:
            swept.append(path)
            sweep_temps(str(target))  # the instant between the temp file's creation and its lock
        return fd

    monkeypatch.setattr(os, "open", open_then_sweep)
    atomic_write(str(target), b"spec", sweep=True)
    assert not os.path.exists(swept[0])
    assert target.read_bytes() == b"spec"
    assert os.listdir(tmp_path) == ["nvidia.yaml"]


def test_a_create_only_write_loses_a_race_without_replacing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer creates the file between our look and our rename: RENAME_NOREPLACE refuses."""
    target = tmp_path / "claim.json"
    real_fsync = os.fsync

    def fsync_while_another_writer_creates(fd: int) -> None:
        if not target.exists():
            target.write_bytes(b"theirs")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_while_another_writer_creates)
    with pytest.raises(FileExistsError):
        atomic_write(str(target), b"ours", no_replace=True)
    assert target.read_bytes() == b"theirs"
    assert os.listdir(tmp_path) == [target.name]


@pytest.mark.parametrize("filesystem", ["with RENAME_NOREPLACE", "without: a hard link"])
def test_a_create_only_write_never_replaces(
    filesystem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cdictk.startpath.helpers import syscalls

    def no_noreplace(*_args: object) -> None:
        raise OSError(22, "Invalid argument")

    if filesystem.startswith("without"):
        monkeypatch.setattr(syscalls, "renameat2", no_noreplace)
    target = tmp_path / "claim.json"
    atomic_write(str(target), b"ours", no_replace=True)
    assert target.read_bytes() == b"ours" and target.stat().st_nlink == 1
    with pytest.raises(FileExistsError):
        atomic_write(str(target), b"again", no_replace=True)
    assert target.read_bytes() == b"ours"
    assert os.listdir(tmp_path) == [target.name]


def test_sweeping_by_prefix_takes_dead_writers_temp_files_of_that_prefix_only(tmp_path: Path) -> None:
    ours = [temp_of(tmp_path / f"nvidia.com-gpu_{n}.json", "0123456789ab") for n in ("a", "b")]
    live = temp_of(tmp_path / "nvidia.com-gpu_c.json", "ba9876543210")
    others = [
        temp_of(tmp_path / "nvidia.com-mig_a.json", "0123456789ab"),  # another producer's
        temp_of(tmp_path / "nvidia.com-gpu_d.json", "not-a-token"),
    ]
    for path in (*ours, live, *others):
        path.write_text("half")
    with live.open("rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        sweep_temps_of(str(tmp_path), "nvidia.com-gpu_")
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in (live, *others))


# The directory a writer writes into: root's alone, or refused with one line.


@pytest.fixture
def base(tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    return tmp_path


@pytest.mark.root
def test_a_users_directory_is_refused_and_nothing_is_written(base: Path) -> None:
    (base / "pub").mkdir()
    os.chown(base / "pub", OTHER, OTHER)
    with pytest.raises(CdictkError) as caught:
        atomic_write(str(base / "pub" / "nvidia.yaml"), b"x")
    assert str(caught.value) == (
        f"{base}/pub: not written: {base}/pub: owned by uid {OTHER}, not root: someone other than root could change it"
    )
    assert os.listdir(base / "pub") == []


@pytest.mark.root
def test_a_users_link_to_a_roots_directory_is_never_written_through(base: Path) -> None:
    """``/tmp/pub/specs -> /somewhere``: root would write wherever the user points the link."""
    (base / "somewhere").mkdir()
    (base / "pub").mkdir()
    os.symlink(base / "somewhere", base / "pub" / "specs")
    os.lchown(base / "pub" / "specs", OTHER, OTHER)
    with pytest.raises(CdictkError, match=r"specs: owned by uid 12345"):
        atomic_write(str(base / "pub" / "specs" / "nvidia.yaml"), b"x")
    with pytest.raises(CdictkError, match=r"specs: owned by uid 12345"):
        writable_directory(str(base / "pub" / "specs" / "cdi"))
    assert os.listdir(base / "somewhere") == []
    os.lchown(base / "pub" / "specs", 0, 0)  # root's own link: root chose where it leads
    atomic_write(str(base / "pub" / "specs" / "nvidia.yaml"), b"x")
    assert os.listdir(base / "somewhere") == ["nvidia.yaml"]


@pytest.mark.root
def test_a_users_directory_between_two_roots_links_is_never_written_through(base: Path) -> None:
    """``out -> userdir/hop -> target``: both links root's, the directory between them a user's, who
    may swap ``hop`` for a link of theirs at will. Before: the links' own path and where they end up
    were checked, never ``userdir``, and root wrote into ``target``."""
    (base / "target").mkdir()
    (base / "userdir").mkdir()
    os.symlink(base / "target", base / "userdir" / "hop")
    os.chown(base / "userdir", OTHER, OTHER)
    os.symlink(base / "userdir" / "hop", base / "out")
    with pytest.raises(CdictkError, match=rf"{base}/userdir: owned by uid {OTHER}"):
        check_directory(str(base / "out"))
    with pytest.raises(CdictkError, match=rf"{base}/userdir: owned by uid {OTHER}"):
        atomic_write(str(base / "out" / "spec.yaml"), b"x")
    assert os.listdir(base / "target") == []


@pytest.mark.root
def test_dot_dot_after_a_link_is_where_the_link_led_not_where_the_text_says(base: Path) -> None:
    """``x/ul/../victim``: the kernel goes up from where ``ul`` leads, a user's directory. Before: the
    text was folded to ``x/victim`` (root's), checked, and root wrote into the user's ``victim``."""
    (base / "x" / "victim").mkdir(parents=True)
    (base / "home" / "a").mkdir(parents=True)
    (base / "home" / "victim").mkdir()
    for theirs in ("home", "home/a", "home/victim"):
        os.chown(base / theirs, OTHER, OTHER)
    os.symlink(base / "home" / "a", base / "x" / "ul")
    os.lchown(base / "x" / "ul", OTHER, OTHER)
    path = f"{base}/x/ul/../victim/spec.yaml"
    with pytest.raises(CdictkError, match=rf"{base}/x/ul: owned by uid {OTHER}"):
        atomic_write(path, b"x")
    os.lchown(base / "x" / "ul", 0, 0)  # root's own link: the walk goes on into the user's directory
    with pytest.raises(CdictkError, match=rf"{base}/home: owned by uid {OTHER}"):
        atomic_write(path, b"x")
    assert os.listdir(base / "home" / "victim") == [] and os.listdir(base / "x" / "victim") == []


@pytest.mark.root
def test_group_writable_refused_sticky_only_as_the_directory_written_into(base: Path) -> None:
    (base / "shared").mkdir()
    os.chmod(base / "shared", 0o775)
    with pytest.raises(CdictkError, match=r"writable by group or others \(mode 0775\)"):
        check_directory(str(base / "shared"))
    os.chmod(base / "shared", 0o1777)
    check_directory(str(base / "shared"))  # like /tmp: nobody else may rename what root puts there
    atomic_write(str(base / "shared" / "f"), b"x")
    (base / "shared" / "sub").mkdir(mode=0o755)
    check_directory(str(base / "shared" / "sub"))  # root's, in a sticky one: only root may swap it


@pytest.mark.root
def test_a_file_a_user_planted_in_a_sticky_directory_keeps_neither_owner_nor_mode(base: Path) -> None:
    """A user makes ``/tmp/x/config.toml`` (0666, theirs) before root edits it: keeping its owner and
    mode gave root's file back to the user. Before: owned by the user, mode 0666, after the write."""
    (base / "tmp").mkdir()
    os.chmod(base / "tmp", 0o1777)
    planted = base / "tmp" / "config.toml"
    planted.write_text("theirs")
    os.chown(planted, OTHER, OTHER)
    os.chmod(planted, 0o4777)
    atomic_write(str(planted), b"root's")
    st = planted.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o644)
    os.chmod(planted, 0o600)  # root's own file there keeps its mode
    atomic_write(str(planted), b"again")
    assert stat.S_IMODE(planted.stat().st_mode) == 0o600
    os.chown(planted, OTHER, OTHER)  # in a directory only root can write, another owner is root's choice
    os.chmod(base / "tmp", 0o755)
    atomic_write(str(planted), b"kept")
    assert (planted.stat().st_uid, stat.S_IMODE(planted.stat().st_mode)) == (OTHER, 0o600)


@pytest.mark.root
def test_nothing_is_made_under_a_users_directory_and_a_users_new_one_is_refused(base: Path) -> None:
    (base / "home").mkdir()
    os.chown(base / "home", OTHER, OTHER)
    with pytest.raises(CdictkError, match="owned by uid"):
        writable_directory(str(base / "home" / "a" / "cdi"))
    assert os.listdir(base / "home") == []
    (base / "tmp").mkdir()
    os.chmod(base / "tmp", 0o1777)
    writable_directory(str(base / "tmp" / "mine" / "cdi"))  # made by root, 0755, in a sticky directory
    assert stat.S_IMODE(os.stat(base / "tmp" / "mine").st_mode) == 0o755
    (base / "tmp" / "theirs").mkdir()  # a user was first
    os.chown(base / "tmp" / "theirs", OTHER, OTHER)
    with pytest.raises(CdictkError, match="theirs: owned by uid"):
        writable_directory(str(base / "tmp" / "theirs" / "cdi"))
    assert os.listdir(base / "tmp" / "theirs") == []


def test_an_oci_bundle_is_the_engines_and_left_unchecked(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)
    atomic_write(str(tmp_path / "config.json"), b"{}", engine_directory=True)
    with pytest.raises(CdictkError, match="writable by group or others"):
        atomic_write(str(tmp_path / "other.json"), b"{}")
