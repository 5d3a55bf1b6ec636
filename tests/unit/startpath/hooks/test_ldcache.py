"""The update-ldcache hook on small rootfs trees: cache contents, drop-ins, idempotence, and image attacks.

Stub libraries with real SONAMEs stand in for the system and driver libraries. The hook writes the
cache itself (:mod:`cdictk.startpath.hooks.ldscan`) and runs the host's static ldconfig, inside the sandbox, only
for an image that needs it (``needs_ldconfig``); either way the host's ldconfig reads the result.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import ldcache
from cdictk.startpath.hooks.ldcache import DRIVER_CONF, SYSTEM_CONF, update_ldcache
from tests import REPO
from tests.rootmarker import root_only
from tests.unit.startpath.hooks.sandbox_programs import (
    HOST_LDCONFIG,
    Programs,
    mountinfo,
    programs,
    run_isolated,
)

TRIPLET = ldcache._TRIPLETS.get(os.uname().machine, "x86_64-linux-gnu")
SYSTEM_DIR = f"/usr/lib/{TRIPLET}"
DRIVER_DIR = "/usr/local/nvidia/lib64"


@pytest.fixture(scope="module")
@root_only
def built(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    return programs(tmp_path_factory)


def make_rootfs(base: Path, built: Programs, *, debian: bool = True) -> Path:
    """A minimal image: libfoo in the system folder, libdrv in the driver folder."""
    root = base / "rootfs"
    (root / "etc").mkdir(parents=True)
    if debian:
        (root / "etc" / "debian_version").write_text("12.0\n")
    for folder, lib in ((SYSTEM_DIR, "libfoo.so.1.2.3"), (DRIVER_DIR, "libdrv.so.550.54")):
        inside = root / folder.lstrip("/")
        inside.mkdir(parents=True, exist_ok=True)
        shutil.copy(built.libs[lib], inside / lib)
    return root


def needs_ldconfig(root: Path) -> Path:
    """An image the cache writer hands to ldconfig (a glibc-hwcaps directory): the sandbox's cases."""
    (root / SYSTEM_DIR.lstrip("/") / "glibc-hwcaps" / "x86-64-v3").mkdir(parents=True)
    return root


def run(
    root: Path,
    folders: list[str],
    ldconfig_path: str = "/sbin/ldconfig",
    timeout: float = ldcache.LDCONFIG_TIMEOUT,
    *,
    openat2: bool = True,
) -> None:
    with Rootfs(str(root), use_openat2=openat2) as rootfs:
        update_ldcache(rootfs, folders, ldconfig_path, timeout=timeout)


def cache_of(root: Path) -> dict[str, str]:
    """SONAME -> path, as the host ldconfig reads the container's cache."""
    out = subprocess.run(
        ["/sbin/ldconfig", "-p", "-C", str(root / "etc" / "ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    entries = {}
    for line in out.splitlines()[1:]:
        if "=>" in line:
            name, _, path = line.partition("=>")
            entries[name.split()[0]] = path.strip()
    return entries


def snapshot(path: Path) -> dict[str, tuple[int, int, int]]:
    """(inode, mtime, mode) of everything under ``path``, links not followed."""
    result = {}
    for entry in [path, *path.rglob("*")]:
        st = entry.lstat()
        result[str(entry)] = (st.st_ino, st.st_mtime_ns, st.st_mode)
    return result


# What it does


@pytest.mark.root
@pytest.mark.parametrize("indexer", ["writer", "ldconfig"])
def test_the_cache_lists_driver_and_system_libraries_and_soname_links_exist(
    built: Programs, tmp_path: Path, indexer: str
) -> None:
    root = make_rootfs(tmp_path, built)
    if indexer == "ldconfig":
        needs_ldconfig(root)
    before = mountinfo()
    run(root, [DRIVER_DIR])
    assert mountinfo() == before
    assert cache_of(root) == {
        "libfoo.so.1": f"{SYSTEM_DIR}/libfoo.so.1",
        "libdrv.so.1": f"{DRIVER_DIR}/libdrv.so.1",
    }
    assert os.readlink(root / SYSTEM_DIR.lstrip("/") / "libfoo.so.1") == "libfoo.so.1.2.3"
    assert os.readlink(root / DRIVER_DIR.lstrip("/") / "libdrv.so.1") == "libdrv.so.550.54"
    assert (root / "etc/ld.so.conf").read_text() == "include /etc/ld.so.conf.d/*.conf\n"
    assert (root / DRIVER_CONF.lstrip("/")).read_text() == f"{DRIVER_DIR}\n"
    # Only the system folders that exist in the image.
    assert (root / SYSTEM_CONF.lstrip("/")).read_text() == f"{SYSTEM_DIR}\n/usr/lib\n"
    for conf in ("etc/ld.so.conf", DRIVER_CONF, SYSTEM_CONF):
        assert (root / conf.lstrip("/")).stat().st_mode & 0o7777 == 0o644
    assert sorted(os.listdir(root / "etc/ld.so.conf.d")) == sorted(
        [os.path.basename(DRIVER_CONF), os.path.basename(SYSTEM_CONF)]
    )


@pytest.mark.root
def test_a_second_run_changes_nothing_but_the_cache(built: Programs, tmp_path: Path) -> None:
    root = make_rootfs(tmp_path, built)
    run(root, [DRIVER_DIR, DRIVER_DIR])
    first = snapshot(root)
    cache = cache_of(root)
    run(root, [DRIVER_DIR])
    second = snapshot(root)
    # ldconfig replaces the cache by renaming a new file over it, which also touches /etc.
    for changed in (root / "etc/ld.so.cache", root / "etc"):
        assert second.pop(str(changed))[2] == first.pop(str(changed))[2]
    assert second == first
    assert cache_of(root) == cache


@pytest.mark.root
def test_other_distributions_get_their_own_system_folders(built: Programs, tmp_path: Path) -> None:
    root = make_rootfs(tmp_path, built, debian=False)
    (root / "usr/lib64").mkdir()
    shutil.copy(built.libs["libevil.so.1.0"], root / "usr/lib64" / "libevil.so.1.0")
    run(root, [DRIVER_DIR])
    assert (root / SYSTEM_CONF.lstrip("/")).read_text() == "/usr/lib\n/usr/lib64\n"
    assert cache_of(root)["libevil.so.1"] == "/usr/lib64/libevil.so.1"


@pytest.mark.root
def test_the_images_release_decides_the_cache(built: Programs, tmp_path: Path) -> None:
    """A glibc 2.31 image (its libc.so.6 defines GLIBC_2.30 at most, a host library renamed stands in)
    gets 2.31's cache from the hook: no extension section, the ABI note in each entry; a dangling
    ``.so.`` link in a scanned directory goes, as with any release's ldconfig."""
    root = make_rootfs(tmp_path, built)
    system = root / SYSTEM_DIR.lstrip("/")
    (system / "libgone.so.1").symlink_to("libnothere.so.1.0")
    run(root, [DRIVER_DIR])
    assert not os.path.lexists(system / "libgone.so.1")
    newest = (root / "etc/ld.so.cache").read_bytes()
    assert b"cdictk hook" in newest  # the generator, in 2.33's extension section
    libc = Path(f"/usr/lib/{TRIPLET}/libc.so.6").resolve()
    if not libc.exists():
        pytest.skip("needs the host's libc.so.6")
    # The host's libc with its GLIBC_2.3x version names renamed GLIBC_2.2x: the hook reads 2.2x.
    data = bytearray(libc.read_bytes())
    for minor in range(31, 43):
        data = data.replace(f"GLIBC_2.{minor}\0".encode(), f"GLIBC_2.{minor - 10}\0".encode())
    (system / "libc.so.6").write_bytes(bytes(data))
    (root / "etc/ld.so.cache").unlink()
    run(root, [DRIVER_DIR])
    cache = (root / "etc/ld.so.cache").read_bytes()
    assert cache.startswith(b"glibc-ld.so.cache1.1") and b"cdictk hook" not in cache
    osversions = {}
    for index in range(struct.unpack_from("<I", cache, 20)[0]):
        _, key, _, osversion, _ = struct.unpack_from("<iIIIQ", cache, 48 + 24 * index)
        osversions[cache[key : cache.index(b"\0", key)]] = osversion
    assert osversions[b"libc.so.6"] != 0 and osversions[b"libdrv.so.1"] == 0  # glibc's note, and none
    assert cache_of(root)["libdrv.so.1"] == f"{DRIVER_DIR}/libdrv.so.1"  # the host's ldconfig reads it


@pytest.mark.root
def test_the_images_own_ld_so_conf_is_kept(built: Programs, tmp_path: Path) -> None:
    root = make_rootfs(tmp_path, built)
    (root / "etc/ld.so.conf").write_text("# image\ninclude /etc/ld.so.conf.d/*.conf\n")
    run(root, [DRIVER_DIR])
    assert (root / "etc/ld.so.conf").read_text() == "# image\ninclude /etc/ld.so.conf.d/*.conf\n"
    assert "libdrv.so.1" in cache_of(root)


@pytest.mark.root
def test_without_folders_ldconfig_still_runs_for_the_compat_drop_in(built: Programs, tmp_path: Path) -> None:
    root = make_rootfs(tmp_path, built)
    (root / "etc/ld.so.conf.d").mkdir()
    (root / "etc/ld.so.conf.d/00-cdictk-cuda-compat.conf").write_text(f"{DRIVER_DIR}\n")
    run(root, [])
    assert not (root / DRIVER_CONF.lstrip("/")).exists()
    assert cache_of(root)["libdrv.so.1"] == f"{DRIVER_DIR}/libdrv.so.1"


@pytest.mark.root
def test_a_dot_real_ldconfig_next_to_the_given_path_is_used(built: Programs, tmp_path: Path) -> None:
    wrapper = tmp_path / "ldconfig"
    wrapper.write_text('#!/bin/sh\nexec /sbin/ldconfig.real "$@"\n')  # Ubuntu's wrapper; not ELF
    wrapper.chmod(0o755)
    shutil.copy(HOST_LDCONFIG, tmp_path / "ldconfig.real")
    assert ldcache.normalize_ldconfig_path(str(wrapper)) == f"{wrapper}.real"
    root = make_rootfs(tmp_path, built)
    run(root, [DRIVER_DIR], str(wrapper))
    assert "libdrv.so.1" in cache_of(root)


@pytest.mark.root
def test_musl_images_get_a_path_file_and_no_ldconfig(built: Programs, tmp_path: Path) -> None:
    arch = ldcache._MUSL_ARCHES.get(os.uname().machine)
    if arch is None:
        pytest.skip(f"no musl architecture name for {os.uname().machine}")
    root = make_rootfs(tmp_path, built, debian=False)
    (root / "etc/alpine-release").write_text("3.20.0\n")
    run(root, [DRIVER_DIR], "/nonexistent/ldconfig")  # proves ldconfig is not even looked at
    path_file = root / f"etc/ld-musl-{arch}.path"
    assert path_file.read_text() == f"/lib\n/usr/local/lib\n/usr/lib\n{DRIVER_DIR}\n"
    assert path_file.stat().st_mode & 0o7777 == 0o644
    assert not (root / "etc/ld.so.cache").exists()
    assert not (root / "etc/ld.so.conf").exists()
    first = snapshot(root)
    run(root, [DRIVER_DIR], "/nonexistent/ldconfig")
    assert snapshot(root) == first
    # An image's own path file keeps its entries; only missing folders are added.
    path_file.write_text("/opt/app/lib:/lib\n")
    run(root, [DRIVER_DIR, "/lib"], "/nonexistent/ldconfig")
    assert path_file.read_text() == f"/opt/app/lib\n/lib\n{DRIVER_DIR}\n"


@pytest.mark.root
def test_a_glibc_image_with_musl_installed_is_still_a_glibc_image(built: Programs, tmp_path: Path) -> None:
    arch = ldcache._MUSL_ARCHES.get(os.uname().machine)
    root = make_rootfs(tmp_path, built)
    (root / "lib").mkdir()
    (root / f"lib/ld-musl-{arch}.so.1").write_text("")
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    run(root, [DRIVER_DIR])
    assert "libdrv.so.1" in cache_of(root)


# What it refuses


@pytest.mark.root
@pytest.mark.parametrize("folder", ["usr/lib", "", "/a\nb", "/a\0b", "/a\tb", "/a#b", "/a\x7fb"])
def test_unsafe_folders_are_refused(built: Programs, tmp_path: Path, folder: str) -> None:
    root = make_rootfs(tmp_path, built)
    with pytest.raises(HookError, match=r"^update-ldcache: folder .* must be an absolute path"):
        run(root, [DRIVER_DIR, folder])
    assert not (root / "etc/ld.so.conf.d").exists()


def test_the_host_root_is_refused() -> None:
    for path in ("/", "//", "/."):
        with Rootfs(path) as rootfs, pytest.raises(HookError, match="host's root directory"):
            update_ldcache(rootfs, [DRIVER_DIR], "/nonexistent")


@pytest.mark.root
def test_unsafe_ldconfigs_are_refused_before_the_container_is_touched(
    built: Programs, tmp_path: Path
) -> None:
    user_owned = tmp_path / "user-owned"
    shutil.copy(HOST_LDCONFIG, user_owned)
    os.chown(user_owned, 1000, 1000)
    group_writable = tmp_path / "group-writable"
    shutil.copy(HOST_LDCONFIG, group_writable)
    group_writable.chmod(0o775)
    cases = {
        str(built.dynamic): r"^update-ldcache: ldconfig .* is dynamically linked",
        str(user_owned): "owned by uid 1000, not root",
        str(group_writable): "writable by group or others",
        "sbin/ldconfig": "must be an absolute path",
        str(tmp_path / "missing"): "cannot open ldconfig",
    }
    root = make_rootfs(tmp_path, built)
    for path, message in cases.items():
        with pytest.raises(HookError, match=message):
            run(root, [DRIVER_DIR], path)
    assert not (root / "etc/ld.so.conf").exists()


@pytest.mark.root
def test_a_slow_ldconfig_is_killed_at_the_deadline(built: Programs, tmp_path: Path) -> None:
    root = needs_ldconfig(make_rootfs(tmp_path, built))
    start = time.monotonic()
    with pytest.raises(HookError, match=r"^update-ldcache: ldconfig timed out after 0\.5 s$"):
        run(root, [DRIVER_DIR], str(built.sleeper), timeout=0.5)
    assert time.monotonic() - start < 3


@pytest.mark.root
def test_a_failing_ldconfig_fails_the_hook(built: Programs, tmp_path: Path) -> None:
    root = needs_ldconfig(make_rootfs(tmp_path, built))
    # Its last stderr line joins the one-line error; nothing of it reaches the runtime's log apart.
    message = r"^update-ldcache: ldconfig failed with exit status 3 \(ldconfig: cannot write the cache\)$"
    with pytest.raises(HookError, match=message):
        run(root, [DRIVER_DIR], str(built.exit3))


# Image files that would hold ldconfig up: refused at once, or stopped at the deadline


KINDS = {"fifo": "a FIFO", "socket": "a socket", "device": "a character device", "directory": "a directory"}


def make_node(path: Path, image: str) -> None:
    """A node of kind ``image`` (a key of KINDS) at ``path``, its folders made as needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if image == "fifo":
        os.mkfifo(path)
    elif image == "device":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    elif image == "directory":
        path.mkdir()
    else:
        cwd = os.getcwd()
        os.chdir(path.parent)  # a socket's address is limited to 107 bytes; tmp_path can be longer
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(path.name)
        finally:
            os.chdir(cwd)


def processes_rooted_in(root: Path) -> list[str]:
    """The processes whose root directory is ``root``: the sandboxed ldconfig and its runner."""
    st = root.stat()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            here = os.stat(f"/proc/{pid}/root")
        except OSError:
            continue
        if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino):
            found.append(pid)
    return found


@pytest.mark.root
@pytest.mark.parametrize(("image", "link"), [(image, False) for image in KINDS] + [("fifo", True)])
def test_an_ld_so_conf_that_is_not_a_regular_file_is_refused_before_ldconfig_runs(
    built: Programs, tmp_path: Path, image: str, link: bool
) -> None:
    root = make_rootfs(tmp_path, built)
    conf = root / "etc/ld.so.conf"
    if link:
        make_node(root / "etc/alternatives/ld.so.conf", image)
        conf.symlink_to("/etc/alternatives/ld.so.conf")  # resolved in the rootfs, as ldconfig would
    else:
        make_node(conf, image)
    message = f"update-ldcache: /etc/ld.so.conf in the container is {KINDS[image]}, not a regular file"
    start = time.monotonic()
    with pytest.raises(HookError, match=f"^{re.escape(message)}$"):
        run(root, [DRIVER_DIR])
    assert time.monotonic() - start < 3
    assert not (root / "etc/ld.so.cache").exists()


@pytest.mark.root
@pytest.mark.parametrize(
    ("ld_so_conf", "node", "image"),
    [
        # No ld.so.conf: the one the hook writes includes the image's drop-ins.
        (None, "/etc/ld.so.conf.d/50-image.conf", "fifo"),
        (None, "/etc/ld.so.conf.d/50-image.conf -> /etc/image.fifo", "fifo"),
        (None, "/etc/ld.so.conf.d/50-image.conf", "device"),
        ("include /etc/ld.so.conf.d/*.conf\ninclude /opt/app/ld.conf\n", "/opt/app/ld.conf", "fifo"),
        (
            "include /etc/ld.so.conf.d/*.conf\n\tinclude  app.d/*.conf # relative\n",
            "/etc/app.d/x.conf",
            "fifo",
        ),
    ],
)
def test_an_included_fifo_or_device_is_refused_before_ldconfig_runs(
    built: Programs, tmp_path: Path, ld_so_conf: str | None, node: str, image: str
) -> None:
    root = make_rootfs(tmp_path, built)
    if ld_so_conf is not None:
        (root / "etc/ld.so.conf").write_text(ld_so_conf)
    named, _, target = node.partition(" -> ")
    make_node(root / (target or named).lstrip("/"), image)
    if target:
        (root / named.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / named.lstrip("/")).symlink_to(target)
    message = (
        f"update-ldcache: {named} in the container is {KINDS[image]}, not a regular file"
        " (included by /etc/ld.so.conf)"
    )
    start = time.monotonic()
    with pytest.raises(HookError, match=f"^{re.escape(message)}$"):
        run(root, [DRIVER_DIR])
    assert time.monotonic() - start < 3
    assert not (root / "etc/ld.so.cache").exists()


@pytest.mark.root
@pytest.mark.parametrize(
    "ld_so_conf",
    [
        "include /etc/ld.so.conf /etc/ld.so.conf\n",  # each level reads the next twice: 2^60 reads
        "include /*/* /*/*\n",  # the same, through wildcards the hook does not expand
    ],
)
def test_includes_that_multiply_are_stopped_at_the_default_deadline(
    built: Programs, tmp_path: Path, ld_so_conf: str
) -> None:
    root = make_rootfs(tmp_path, built)
    (root / "etc/ld.so.conf").write_text(ld_so_conf)
    start = time.monotonic()
    with (
        Rootfs(str(root)) as rootfs,
        pytest.raises(HookError, match=r"^update-ldcache: ldconfig timed out after 2 s$"),
    ):
        update_ldcache(rootfs, [DRIVER_DIR])
    assert time.monotonic() - start < 3
    assert processes_rooted_in(root) == []


@pytest.mark.root
def test_what_ldconfig_reads_without_blocking_is_accepted(built: Programs, tmp_path: Path) -> None:
    root = make_rootfs(tmp_path, built)
    confd = root / "etc/ld.so.conf.d"
    confd.mkdir()
    (confd / "dir.conf").mkdir()  # ldconfig reads nothing from it
    os.mkfifo(confd / ".hidden.conf")  # a leading '*' does not match a leading '.'
    os.mkfifo(confd / "README")
    (confd / "dangling.conf").symlink_to("/nonexistent.conf")
    (confd / "self.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")  # one cycle: ldconfig copes
    os.mkfifo(root / "etc/not-a-folder")
    (confd / "folders.conf").write_text("/etc/not-a-folder\n")  # a folder line: ldconfig only lists it
    # An absolute link resolves in the rootfs, where it is a regular file; on the host it is a FIFO.
    host_fifo = tmp_path / "host-ld.so.conf"
    os.mkfifo(host_fifo)
    inside = root / str(host_fifo).lstrip("/")
    inside.parent.mkdir(parents=True)
    inside.write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf").symlink_to(host_fifo)
    start = time.monotonic()
    run(root, [DRIVER_DIR])
    assert time.monotonic() - start < 3
    assert cache_of(root)["libdrv.so.1"] == f"{DRIVER_DIR}/libdrv.so.1"


# Image attacks: every write stays inside the rootfs


@pytest.mark.root
@pytest.mark.parametrize("inside_exists", [True, False])
def test_ld_so_conf_d_linked_to_a_host_folder_is_read_inside_the_rootfs(
    built: Programs, tmp_path: Path, inside_exists: bool
) -> None:
    host = tmp_path / "host-confd"
    host.mkdir()
    root = make_rootfs(tmp_path, built)
    (root / "etc/ld.so.conf.d").symlink_to(host)  # absolute: means <rootfs><host> in the container
    inside = root / str(host).lstrip("/")
    if inside_exists:
        inside.mkdir(parents=True)
    run(root, [DRIVER_DIR])
    assert os.listdir(host) == []
    assert (inside / os.path.basename(DRIVER_CONF)).read_text() == f"{DRIVER_DIR}\n"
    assert "libdrv.so.1" in cache_of(root)


@pytest.mark.root
@pytest.mark.parametrize("openat2", [True, False])
@pytest.mark.parametrize("target", ["/", "../../../../../../../../.."])
def test_etc_linked_to_the_root_stays_in_the_rootfs(
    built: Programs, tmp_path: Path, target: str, openat2: bool
) -> None:
    root = make_rootfs(tmp_path, built)
    shutil.rmtree(root / "etc")
    (root / "etc").symlink_to(target)
    host_etc = snapshot(Path("/etc/ld.so.conf.d")), Path("/etc/ld.so.cache").stat().st_mtime_ns
    run(root, [DRIVER_DIR], openat2=openat2)
    assert (snapshot(Path("/etc/ld.so.conf.d")), Path("/etc/ld.so.cache").stat().st_mtime_ns) == host_etc
    # In the container /etc is its root: that is where everything went.
    assert (root / "ld.so.conf.d" / os.path.basename(DRIVER_CONF)).read_text() == f"{DRIVER_DIR}\n"
    assert (root / "ld.so.cache").is_file()


PROC_ESCAPE_SCRIPT = r"""
import os, shutil, subprocess, sys
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.ldcache import update_ldcache
control_root, root, control_host, host = sys.argv[1:5]
for r, h in ((control_root, control_host), (root, host)):
    subprocess.run(["mount", "-t", "proc", "proc", f"{r}/proc"], check=True)
    # This process's root is the host's. (/proc/1/root would do on a node; here pid 1 is not ours to
    # inspect, and the runtime or the hook is as good a way out.)
    os.symlink(f"/proc/{os.getpid()}/root{h}", f"{r}/usr/lib/evil")
# Control: plain chroot + the same static ldconfig follows /proc/1/root out to the host.
real = "/sbin/ldconfig.real"  # Ubuntu's /sbin/ldconfig is a shell script around it
shutil.copy(real if os.path.exists(real) else "/sbin/ldconfig", f"{control_root}/ldconfig")
subprocess.run(["chroot", control_root, "/ldconfig", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"], check=True)
with Rootfs(root) as rootfs:
    update_ldcache(rootfs, ["/usr/local/nvidia/lib64"])
"""


@pytest.mark.root
def test_a_lib_folder_linked_through_proc_cannot_reach_the_host(built: Programs, tmp_path: Path) -> None:
    roots, hosts = [], []
    for name in ("control", "hook"):
        host = tmp_path / f"{name}-host-libs"
        host.mkdir()
        shutil.copy(built.libs["libevil.so.1.0"], host / "libevil.so.1.0")
        root = make_rootfs(tmp_path / name, built)
        (root / "proc").mkdir()
        # The image lists its own folder, /usr/lib/evil: a link (made by the script) that leads out
        # through a procfs magic link.
        (root / "etc/ld.so.conf.d").mkdir()
        (root / "etc/ld.so.conf.d/evil.conf").write_text("/usr/lib/evil\n")
        (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
        roots.append(str(root))
        hosts.append(host)
    run_isolated(PROC_ESCAPE_SCRIPT, *roots, *map(str, hosts))
    assert (hosts[0] / "libevil.so.1").is_symlink(), "the control did not escape: this test proves nothing"
    assert sorted(os.listdir(hosts[1])) == ["libevil.so.1.0"]
    assert "libdrv.so.1" in cache_of(Path(roots[1]))


BIND_SCRIPT = r"""
import subprocess, sys
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.ldcache import update_ldcache
source, root = sys.argv[1:3]
subprocess.run(["mount", "--bind", source, root], check=True)
before = open("/proc/self/mountinfo").read()
with Rootfs(root) as rootfs:
    update_ldcache(rootfs, ["/usr/local/nvidia/lib64"])
assert open("/proc/self/mountinfo").read() == before, "a mount leaked"
"""


@pytest.mark.root
def test_a_bind_mounted_rootfs_works(built: Programs, tmp_path: Path) -> None:
    source = make_rootfs(tmp_path / "image", built)
    target = tmp_path / "bundle-rootfs"
    target.mkdir()
    run_isolated(BIND_SCRIPT, str(source), str(target))
    assert cache_of(source)["libdrv.so.1"] == f"{DRIVER_DIR}/libdrv.so.1"
    assert os.listdir(target) == []  # the mount went away with its namespace


VOLUME_SCRIPT = r"""
import subprocess, sys
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.ldcache import update_ldcache
volume, mountpoint, root = sys.argv[1:4]
subprocess.run(["mount", "--bind", volume, mountpoint], check=True)
with Rootfs(root) as rootfs:
    update_ldcache(rootfs, ["/usr/local/nvidia/lib64"])
"""


@pytest.mark.root
def test_a_library_folder_on_a_volume_gets_no_link_and_the_container_still_starts(
    built: Programs, tmp_path: Path
) -> None:
    """ldconfig says "Can't link" for a directory it cannot write and goes on; so does the writer, whose
    links never cross a mount (here a volume the image's ld.so.conf names)."""
    root = make_rootfs(tmp_path, built)
    volume = tmp_path / "volume"
    volume.mkdir()
    shutil.copy(built.libs["libevil.so.1.0"], volume / "libevil.so.1.0")
    (root / "opt/vol").mkdir(parents=True)
    (root / "etc/ld.so.conf.d").mkdir()
    (root / "etc/ld.so.conf.d/vol.conf").write_text("/opt/vol\n")
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    run_isolated(VOLUME_SCRIPT, str(volume), str(root / "opt/vol"), str(root))
    assert sorted(os.listdir(volume)) == ["libevil.so.1.0"]  # nothing written across the mount
    cache = cache_of(root)
    assert (
        cache["libevil.so.1"] == "/opt/vol/libevil.so.1"
        and cache["libdrv.so.1"] == f"{DRIVER_DIR}/libdrv.so.1"
    )


# Cost on every container start


def test_importing_the_hook_loads_only_small_standard_modules() -> None:
    repo = str(REPO)
    code = f"import sys; sys.path.insert(0, {repo!r}); import cdictk.startpath.hooks.ldcache; print(' '.join(sys.modules))"
    loaded = set(
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    heavy = {"typing", "dataclasses", "re", "json", "subprocess", "enum", "argparse", "shutil", "glob"}
    heavy |= {
        "fnmatch",
        "uuid",
        "ctypes",
        "platform",
        "signal",
        "contextlib",
        "cdictk.startpath.helpers.syscalls",
    }
    assert "cdictk.startpath.hooks.ldcache" in loaded
    assert loaded & heavy == set()


def test_run_from_a_node_runtime_the_hook_falls_back_on_the_runtimes_ldconfig(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node may have no ldconfig (Bottlerocket, Talos): the runtime carries its image's own."""
    from cdictk.startpath.hooks import ldcache

    assert ldcache.default_ldconfig() == "/sbin/ldconfig"
    monkeypatch.setattr(ldcache, "bundled_ldconfig", lambda: "/opt/cdictk/versions/abc/libexec/ldconfig")
    assert ldcache.default_ldconfig() == "/opt/cdictk/versions/abc/libexec/ldconfig"
