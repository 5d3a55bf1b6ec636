"""Which file cdictk loads for a SONAME: the cache's own entry for it and this process's ABI, in the
cache's order, and only when that file and its way are root's alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.node.ldcachereader import read_ld_cache
from cdictk.node.libchoice import LibraryError, judge_opened, library_path, load, loadable, process_abi
from tests.unit.node.test_ldcachereader import new_cache

X86_64, I386, AARCH64, X32 = 0x0303, 0x0003, 0x0A03, 0x0803
NAME = "libx.so.1"
USER = 1000


def library(root: Path, path: str, text: bytes = b"\x7fELF stand-in\n") -> str:
    """A file at ``path`` inside ``root`` (root's, 0755, in root's 0755 directories)."""
    host = root / path.lstrip("/")
    host.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    host.write_bytes(text)
    host.chmod(0o755)
    return str(host)


def cache(root: Path, *entries: tuple[int, str, str], hwcaps: list[int] | None = None) -> None:
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/ld.so.cache").write_bytes(new_cache(list(entries), hwcaps=hwcaps))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A driver root whose directories are root's (or this user's), 0755 from / down."""
    base = tmp_path / "root"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    return base


def test_the_caches_first_entry_for_the_name_is_the_one(root: Path) -> None:
    a, b = library(root, f"/a/{NAME}"), library(root, f"/b/{NAME}")
    cache(root, (X86_64, NAME, f"/a/{NAME}"), (X86_64, NAME, f"/b/{NAME}"))
    assert library_path(str(root), NAME, abi=X86_64) == a
    cache(root, (X86_64, NAME, f"/b/{NAME}"), (X86_64, NAME, f"/a/{NAME}"))
    assert library_path(str(root), NAME, abi=X86_64) == b


def test_entries_of_another_abi_or_with_hwcaps_are_passed_over(root: Path) -> None:
    paths = {
        "i386": f"/usr/lib/i386-linux-gnu/{NAME}",
        "x32": f"/usr/libx32/{NAME}",
        "aarch64": f"/usr/lib/aarch64-linux-gnu/{NAME}",
        "v3": f"/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/{NAME}",
        "x86_64": f"/usr/lib/x86_64-linux-gnu/{NAME}",
    }
    host = {name: library(root, path) for name, path in paths.items()}
    cache(
        root,
        (I386, NAME, paths["i386"]),
        (X32, NAME, paths["x32"]),
        (AARCH64, NAME, paths["aarch64"]),
        (X86_64, NAME, paths["v3"]),
        (X86_64, NAME, paths["x86_64"]),
        hwcaps=[0, 0, 0, 1 << 62, 0],
    )
    assert library_path(str(root), NAME, abi=X86_64) == host["x86_64"]
    assert library_path(str(root), NAME, abi=AARCH64) == host["aarch64"]
    assert library_path(str(root), NAME, abi=I386) == host["i386"]


def test_this_process_takes_the_flags_of_its_own_libc(tmp_path: Path) -> None:
    """The host's cache lists the libc this interpreter runs on with the flags its loader takes."""
    if not os.path.exists("/etc/ld.so.cache"):
        pytest.skip("this machine has no /etc/ld.so.cache")
    with open("/proc/self/maps", encoding="utf-8") as maps:
        libc = os.path.realpath(next(line.split()[-1] for line in maps if "/libc.so" in line))
    cached = read_ld_cache("/etc/ld.so.cache")
    flags = {e.flags for e in cached if e.name == "libc.so.6" and os.path.realpath(e.path) == libc}
    assert flags == {process_abi()}


def test_a_file_put_in_a_listed_directory_after_ldconfig_is_never_taken(root: Path) -> None:
    """The cache lists /opt/app/lib (for libapp) and names the driver's file for the name: a file of
    the name that appeared in /opt/app/lib since is not the loader's, nor ours."""
    driver = library(root, f"/usr/lib64/{NAME}")
    library(root, "/opt/app/lib/libapp.so.1")
    cache(root, (X86_64, "libapp.so.1", "/opt/app/lib/libapp.so.1"), (X86_64, NAME, f"/usr/lib64/{NAME}"))
    library(root, f"/opt/app/lib/{NAME}")
    assert library_path(str(root), NAME, abi=X86_64) == driver
    # Without an entry for the name, the loader's default directories, never the cache's others.
    cache(root, (X86_64, "libapp.so.1", "/opt/app/lib/libapp.so.1"))
    assert library_path(str(root), NAME, abi=X86_64) == driver
    os.unlink(driver)
    with pytest.raises(LibraryError, match=f"^{NAME}: not found under ") as missing:
        library_path(str(root), NAME, abi=X86_64)
    assert not missing.value.refused


def test_no_cache_or_a_gone_entry_goes_on_to_the_usual_directories(root: Path) -> None:
    tree = library(root, f"/usr/local/nvidia/lib64/{NAME}")  # GKE's tree: no cache lists it
    assert library_path(str(root), NAME, abi=X86_64) == tree
    cache(root, (X86_64, NAME, f"/usr/lib/x86_64-linux-gnu/{NAME}"))  # an entry whose file is gone
    assert library_path(str(root), NAME, abi=X86_64) == tree
    (root / "etc/ld.so.cache").write_bytes(b"garbage")
    assert library_path(str(root), NAME, abi=X86_64) == tree


def test_links_are_followed_inside_the_root(root: Path) -> None:
    real = library(root, f"/usr/lib64/{NAME[:-1]}580.95.05")
    os.symlink(f"/usr/lib64/{NAME[:-1]}580.95.05", root / f"usr/lib64/{NAME}")  # absolute: in the root
    cache(root, (X86_64, NAME, f"/usr/lib64/{NAME}"))
    assert library_path(str(root), NAME, abi=X86_64) == real


@pytest.mark.root
def test_a_users_file_is_refused_and_no_other_taken_instead(root: Path) -> None:
    """A later entry or a usual directory would be the loader's choice neither: nothing is loaded."""
    users = library(root, f"/opt/app/lib/{NAME}")
    os.chown(users, USER, USER)
    library(root, f"/usr/lib64/{NAME}")
    cache(root, (X86_64, NAME, f"/opt/app/lib/{NAME}"), (X86_64, NAME, f"/usr/lib64/{NAME}"))
    with pytest.raises(LibraryError) as refused:
        library_path(str(root), NAME, abi=X86_64)
    assert refused.value.refused
    assert str(refused.value) == (
        f"{NAME}: {users}: owned by uid {USER}, not root: not loaded (cdictk would run its code as root)"
    )


@pytest.mark.root
def test_a_users_directory_on_the_way_is_refused(root: Path) -> None:
    library(root, f"/opt/app/lib/{NAME}")
    os.chown(root / "opt/app", USER, USER)  # the file and lib/ are root's: the user can rename lib/
    cache(root, (X86_64, NAME, f"/opt/app/lib/{NAME}"))
    with pytest.raises(LibraryError, match=f"{root}/opt/app: owned by uid {USER}, not root"):
        library_path(str(root), NAME, abi=X86_64)


def test_a_directory_others_can_write_is_refused(root: Path) -> None:
    library(root, f"/opt/app/lib/{NAME}")
    (root / "opt/app/lib").chmod(0o775)
    cache(root, (X86_64, NAME, f"/opt/app/lib/{NAME}"))
    with pytest.raises(LibraryError, match=r"/opt/app/lib: writable by group or others \(mode 0775\)"):
        library_path(str(root), NAME, abi=X86_64)


@pytest.mark.root
def test_a_link_is_judged_where_it_is_and_where_it_leads(root: Path) -> None:
    """Root's link in root's directory, to a user's file: refused for the file; a user's link to
    root's file: refused for the link."""
    users = library(root, f"/home/user/{NAME}")
    os.chown(users, USER, USER)
    (root / "usr/lib64").mkdir(parents=True)
    os.symlink(f"../../home/user/{NAME}", root / f"usr/lib64/{NAME}")
    cache(root, (X86_64, NAME, f"/usr/lib64/{NAME}"))
    with pytest.raises(LibraryError, match=f"{users}: owned by uid {USER}, not root"):
        library_path(str(root), NAME, abi=X86_64)

    os.unlink(root / f"usr/lib64/{NAME}")
    library(root, f"/usr/lib64/{NAME[:-1]}580")
    os.symlink(f"{NAME[:-1]}580", root / f"usr/lib64/{NAME}")
    os.lchown(root / f"usr/lib64/{NAME}", USER, USER)
    with pytest.raises(LibraryError, match=f"{root}/usr/lib64/{NAME}: owned by uid {USER}, not root"):
        library_path(str(root), NAME, abi=X86_64)


def test_only_a_regular_file_is_loaded(root: Path) -> None:
    (root / "usr/lib64").mkdir(parents=True)
    os.mkfifo(root / f"usr/lib64/{NAME}")  # opening it would block: it is never opened
    with pytest.raises(LibraryError, match="not a regular file") as refused:
        library_path(str(root), NAME, abi=X86_64)
    assert refused.value.refused


@pytest.mark.root
def test_what_a_library_opens_by_name_is_judged_with_it(root: Path) -> None:
    """WSL2's NVML opens libdxcore.so through the loader: a user's one refuses NVML; none is no matter."""
    nvml = library(root, "/usr/lib/wsl/lib/libnvidia-ml.so.1")
    cache(root, (X86_64, "libnvidia-ml.so.1", "/usr/lib/wsl/lib/libnvidia-ml.so.1"))
    assert library_path(str(root), "libnvidia-ml.so.1", opens=("libdxcore.so",), abi=X86_64) == nvml
    dxcore = library(root, "/usr/lib/wsl/lib/libdxcore.so")
    os.chown(dxcore, USER, USER)
    cache(
        root,
        (X86_64, "libnvidia-ml.so.1", "/usr/lib/wsl/lib/libnvidia-ml.so.1"),
        (X86_64, "libdxcore.so", "/usr/lib/wsl/lib/libdxcore.so"),
    )
    expected = f"libnvidia-ml.so.1: libdxcore.so, which it opens: {dxcore}: owned by uid {USER}, not root"
    with pytest.raises(LibraryError, match=f"^{expected}") as refused:
        library_path(str(root), "libnvidia-ml.so.1", opens=("libdxcore.so",), abi=X86_64)
    assert refused.value.refused
    with pytest.raises(LibraryError, match=f"^{expected}"):
        judge_opened(str(root), "libnvidia-ml.so.1", ("libdxcore.so",), abi=X86_64)


@pytest.mark.root
def test_load_checks_before_it_opens(root: Path) -> None:
    """Not an ELF file: had load() opened it, the loader would have said so (OSError)."""
    path = library(root, f"/usr/lib64/{NAME}", b"not ELF")
    with pytest.raises(OSError, match=r"invalid ELF header|file too short"):
        load(path)
    os.chown(path, USER, USER)
    with pytest.raises(LibraryError, match="not root"):
        load(path)
    with pytest.raises(LibraryError, match=r"No such file") as missing:
        loadable(f"{root}/usr/lib64/libnone.so.1")
    assert not missing.value.refused
