"""Regression tests from a security review of cdictk/startpath/hooks: each one reproduced a defect before its fix.

Writes that followed image links into volumes the runtime mounted, a musl path file read through a
link into procfs, ldconfig keeping every capability, the host's root spelled "//", odd strings and a
link chain deep enough to overflow mkdirs' recursion.

Every test that mounts runs the hook in a child process with a private mount namespace
(``unshare --mount``), so nothing it mounts outlives the child. All need root.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.startpath.helpers import ocistate
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import hostbinary, sandbox
from cdictk.startpath.hooks.entry import main
from tests import REPO

MUSL_ARCH = {"x86_64": "x86_64", "aarch64": "aarch64"}.get(os.uname().machine, "x86_64")


def isolated(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a private mount namespace; the mounts it makes vanish with it."""
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r})\n{code}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd="/",
    )


def run_main(argv: list[str], state: dict[str, str]) -> int:
    return main(argv, stdin=io.BytesIO(json.dumps(state).encode()))


# 1. The musl path file is read through image symlinks and copied, world-readable, into the container.

MUSL_LEAK = r"""
import io, json, os, subprocess, sys
from cdictk.startpath.hooks.entry import main
root, arch = sys.argv[1:3]
subprocess.run(["mount", "-t", "proc", "proc", f"{root}/proc"], check=True)
rc = main(["update-ldcache", "--folder", "/usr/lib/nvidia"],
          stdin=io.BytesIO(json.dumps({"bundle": "/", "root": root}).encode()))
path = f"{root}/etc/ld-musl-{arch}.path"
content = open(path).read() if os.path.isfile(path) and not os.path.islink(path) else ""
print(json.dumps({"rc": rc, "content": content}))
"""


@pytest.mark.root
def test_musl_path_file_linked_to_procfs_is_not_copied_into_the_container(tmp_path: Path) -> None:
    """The image links /etc/ld-musl-<arch>.path to /proc/iomem (or /proc/timer_list, 0400 and masked
    by runc only after the hooks): the hook, root with all capabilities, reads it and writes its
    tokens, mode 0644, where any container user reads them (physical memory map, kernel timers)."""
    root = tmp_path / "rootfs"
    for d in ("etc", "proc", "lib"):
        (root / d).mkdir(parents=True)
    (root / "etc/alpine-release").write_text("3.19.0\n")
    (root / f"lib/ld-musl-{MUSL_ARCH}.so.1").write_bytes(b"")
    os.symlink("/proc/iomem", root / f"etc/ld-musl-{MUSL_ARCH}.path")
    result = isolated(MUSL_LEAK, str(root), MUSL_ARCH)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "System" not in report["content"], "procfs content copied into the container's path file"


# 2. Writes follow image symlinks into host directories the spec bind-mounts read-write.

HOST_BIND = r"""
import io, json, os, subprocess, sys
from cdictk.startpath.hooks.entry import main
root, host = sys.argv[1:3]
subprocess.run(["mount", "--bind", "-o", "nosuid,nodev,noexec", host, f"{root}/tmp/nvidia-mps"], check=True)
rc = main(["batch", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
           "--folder", "/usr/lib/x86_64-linux-gnu"],
          stdin=io.BytesIO(json.dumps({"bundle": "/", "root": root}).encode()))
print(json.dumps({"rc": rc}))
"""


@pytest.mark.root
def test_hook_writes_do_not_land_in_a_host_directory_bind_mounted_read_write(tmp_path: Path) -> None:
    """A spec may bind a host directory read-write (libnvidia-container binds the MPS pipe directory
    so at /tmp/nvidia-mps; cdictk's own specs bind it read-only). With /etc/ld.so.conf.d and /usr/lib/<triplet> linked into it, the hook (root, unconfined by the
    container's LSM label, user and capabilities) creates directories, drop-ins and symlinks on the host."""
    if shutil.which("unshare") is None or not os.path.exists("/sbin/ldconfig"):
        pytest.skip("needs unshare and the host's ldconfig")
    root, host = tmp_path / "rootfs", tmp_path / "host-mps"
    host.mkdir()
    for d in ("etc", "usr/lib", "tmp/nvidia-mps"):
        (root / d).mkdir(parents=True)
    (root / "etc/debian_version").write_text("12\n")
    os.symlink("/tmp/nvidia-mps", root / "etc/ld.so.conf.d")
    os.symlink("/tmp/nvidia-mps/lib", root / "usr/lib/x86_64-linux-gnu")  # dangling: mkdirs makes it
    result = isolated(HOST_BIND, str(root), str(host))
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(host)) == [], "the hook wrote into the host directory"


# 3. The ldconfig sandbox keeps every capability: one memory bug in ldconfig is a host escape.

EVIL_C = r"""
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    FILE *out = fopen("/report", "w");
    if (!out) return 10;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2] = {{0}};
    syscall(SYS_capget, &h, d);
    fprintf(out, "{\"capeff_lo\": %u, \"capeff_hi\": %u", d[0].effective, d[1].effective);
    mkdir("/.p", 0700);
    int r = mount("proc", "/.p", "proc", 0, NULL);
    fprintf(out, ", \"mount_proc\": %d", r == 0 ? 0 : errno);
    int w = -1;
    if (r == 0) {
        int fd = open("/.p/sys/kernel/core_pattern", O_WRONLY); /* opened, never written */
        w = fd >= 0 ? 0 : errno;
        if (fd >= 0) close(fd);
        umount2("/.p", MNT_DETACH);
    }
    fprintf(out, ", \"core_pattern_open_for_write\": %d}\n", w);
    return fclose(out) == 0 ? 0 : 11;
}
"""
CAP_MKNOD, CAP_SYS_ADMIN, CAP_DAC_READ_SEARCH, CAP_SYS_MODULE = 27, 21, 2, 16


@pytest.mark.root
def test_ldconfig_sandbox_drops_capabilities(tmp_path: Path) -> None:
    """A static program in ldconfig's place (as an ldconfig exploited by a crafted ELF file in the
    image would be) mounts a fresh procfs and opens the host-wide /proc/sys/kernel/core_pattern for
    writing: a usermode helper run as root in the host's namespaces on the next crash."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    (tmp_path / "evil.c").write_text(EVIL_C)
    exe_path = tmp_path / "evil"
    built = subprocess.run(
        ["gcc", "-static", "-O1", "-o", str(exe_path), str(tmp_path / "evil.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.skip(f"gcc -static failed: {built.stderr}")
    exe_path.chmod(0o755)
    root = tmp_path / "rootfs"
    root.mkdir()
    exe = hostbinary.load_host_binary(str(exe_path), "ldconfig")
    try:
        with Rootfs(str(root)) as rootfs:
            sandbox.run_in_rootfs(rootfs, exe, ["ldconfig"], timeout=5, what="ldconfig")
    finally:
        os.close(exe)
    report = json.loads((root / "report").read_text())
    caps = report["capeff_lo"] | report["capeff_hi"] << 32
    assert report["mount_proc"] != 0, "the sandboxed program can mount"
    assert report["core_pattern_open_for_write"] != 0
    for cap in (CAP_SYS_ADMIN, CAP_MKNOD, CAP_DAC_READ_SEARCH, CAP_SYS_MODULE):
        assert not caps & (1 << cap), f"capability {cap} kept in the sandbox"


# 4. "Never the host's root" is checked on the string only.


@pytest.mark.parametrize("root", ["//", "//.", "//tmp/.."])
def test_rootfs_spelled_as_host_root_is_refused(root: str) -> None:
    with pytest.raises(HookError):
        ocistate.container_state({"bundle": "/run/bundle", "root": root})


@pytest.mark.root
def test_rootfs_that_is_the_host_root_through_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bundle").mkdir()
    os.symlink("/", tmp_path / "bundle/rootfs")
    victim = tmp_path / "created-on-the-host"
    rc = run_main(
        ["create-symlinks", "--link", f"x::{victim}"], {"bundle": str(tmp_path / "bundle"), "root": "rootfs"}
    )
    assert not os.path.lexists(victim), "create-symlinks worked on the host's root"
    assert rc == 1


# 5. Odd strings: one clear line, not "internal error: UnicodeEncodeError / ValueError".


@pytest.mark.parametrize(
    ("argv", "state"),
    [
        (["batch", "--folder", "/usr/lib/\udcff"], {"root": "rootfs"}),  # argv bytes that are not UTF-8
        (
            [
                "enable-cuda-compat",
                "--host-driver-version",
                "1.0",
                "--cuda-compat-container-root",
                "/c\udcff",
            ],
            {"root": "rootfs"},
        ),
        (["batch"], {"root": "rootfs\ud800"}),  # a lone surrogate escaped in the state JSON
        (["batch"], {"bundle": "/run/b\ud800"}),  # ... in the bundle, read for config.json
        (["batch"], {"bundle": "/run/b\0"}),  # NUL in the bundle
    ],
)
def test_odd_strings_give_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], state: dict[str, str]
) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "c\udcff").mkdir()
    (root / "c\udcff/libcuda.so.999.1").write_bytes(b"\x7fELF")
    assert run_main(argv, {"bundle": str(tmp_path), **state}) in (0, 1)
    assert "internal error" not in capsys.readouterr().err


def test_long_dangling_link_chain_gives_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mkdirs recurses once per missing component: a 4 KiB link target overflows Python's stack."""
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    os.symlink("/" + "/".join(["d"] * 2000), root / "etc/ld.so.conf.d")
    run_main(["update-ldcache", "--folder", "/usr/lib"], {"bundle": str(tmp_path), "root": "rootfs"})
    assert "RecursionError" not in capsys.readouterr().err


# The same rule without openat2 (old kernels, seccomp): the descriptor walk, and chmod.

WALK_XDEV = r"""
import json, os, subprocess, sys
from cdictk.startpath.hooks.chmod import chmod_paths
from cdictk.startpath.helpers.rootfs import Rootfs
root, volume = sys.argv[1:3]
subprocess.run(["mount", "--bind", volume, f"{root}/vol"], check=True)
outcome = {}
with Rootfs(root, use_openat2=False) as rootfs:
    try:
        rootfs.write_file("/etc/conf.d/00-x.conf", b"/usr/lib\n")
        outcome["write"] = "written"
    except OSError as exc:
        outcome["write"] = exc.strerror
    chmod_paths(rootfs, 0o777, ["/etc/conf.d/victim"])
print(json.dumps(outcome))
"""


@pytest.mark.root
def test_the_walk_and_chmod_do_not_cross_into_a_mounted_volume(tmp_path: Path) -> None:
    root, volume = tmp_path / "rootfs", tmp_path / "volume"
    (root / "etc").mkdir(parents=True)
    (root / "vol").mkdir()
    os.symlink("/vol", root / "etc/conf.d")
    volume.mkdir()
    (volume / "victim").write_text("host file\n")
    os.chmod(volume / "victim", 0o600)
    result = isolated(WALK_XDEV, str(root), str(volume))
    assert result.returncode == 0, result.stderr
    assert "crosses a mount point" in json.loads(result.stdout)["write"]
    assert "on another mount; left alone" in result.stderr
    assert sorted(os.listdir(volume)) == ["victim"]
    assert (volume / "victim").stat().st_mode & 0o777 == 0o600
