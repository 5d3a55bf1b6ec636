"""The hooks of a generated spec, run for real by runc and crun on a Debian image.

One spec is generated per module for a fake one-GPU node; each test injects ``nvidia.com/gpu=0`` into
a bundle whose rootfs is a fresh overlay of a Debian bookworm minbase image (tests/fetch-rootfs.sh),
either as the overlay's mount point or as a plain directory inside it (a hook that pivots into the
rootfs as it finds it fails on the latter: NVIDIA's issue #1385). The container then shows what the hooks did: ``ldconfig -p`` lists the
driver's libraries, the spec's links exist, ld.so.conf.d holds a drop-in for the driver's folders. On
the host nothing changes: a sentinel directory and the node's driver root keep every byte, mode and
time, and no mount is left behind.

The bundles have a writable root (``root.readonly: false``, as podman, containerd and Docker run
containers): crun 1.8 makes a read-only rootfs read-only before createContainer hooks run, so no hook
can write into it there, NVIDIA's included.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import node_with_spec
from tests.e2e.conftest import DEBIAN_ROOTFS, Runtime
from tests.e2e.test_runtimes import cdictk, make_bundle
from tests.fakenode.node import LIB_DIR, FakeNode

pytestmark = pytest.mark.root

V = "580.95.05"
HOOK_ENV = ["LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
OUR_FOLDERS = {LIB_DIR, f"{LIB_DIR}/vdpau"}


@dataclass(frozen=True)
class Generated:
    node: FakeNode
    spec_dir: Path


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> Generated:
    """The fake "single" node (as ``make_node`` builds it) and its spec, shared by the module's tests."""
    return Generated(*node_with_spec(tmp_path_factory, stub_cache, "hooks"))


# The bundle


def gpu_bundle(path: Path, rootfs: Path, spec_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A bundle on ``rootfs`` with nvidia.com/gpu=0 injected; returns it and its createContainer hooks."""
    bundle = make_bundle(path, rootfs, "true")
    config_path = bundle / "config.json"
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "nvidia.com/gpu=0", str(config_path)
    )
    assert injected.returncode == 0, injected.stderr
    config = json.loads(config_path.read_text())
    config["root"]["readonly"] = False
    config_path.write_text(json.dumps(config))
    hooks: list[dict[str, Any]] = config.get("hooks", {}).get("createContainer", [])
    return bundle, hooks


def set_script(bundle: Path, script: str) -> None:
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    config["process"]["args"] = ["sh", "-c", f"exec 2>&1; {script}"]
    config_path.write_text(json.dumps(config))


def option_values(hooks: Iterable[dict[str, Any]], name: str) -> list[str]:
    """Every value of ``--name VALUE`` / ``--name=VALUE`` across the hooks' args."""
    values = []
    for hook in hooks:
        args = hook["args"]
        for i, arg in enumerate(args):
            if arg == f"--{name}" and i + 1 < len(args):
                values.append(args[i + 1])
            elif arg.startswith(f"--{name}="):
                values.append(arg.partition("=")[2])
    return values


def links_of(hooks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(target, link) for every --link and --device-link the hooks carry."""
    pairs = option_values(hooks, "link") + option_values(hooks, "device-link")
    return [(target, link) for target, _, link in (pair.partition("::") for pair in pairs)]


# What the container shows

CHECK = """
echo '== ldconfig'; ldconfig -p
echo '== links'; {links}
echo '== conf.d'; for f in /etc/ld.so.conf.d/*; do echo "$f:"; cat "$f"; done
echo '== end'
"""


def check_script(links: list[tuple[str, str]]) -> str:
    lines = [
        f'printf "%s -> %s\\n" {shlex.quote(link)} "$(readlink {shlex.quote(link)})"' for _, link in links
    ]
    return CHECK.format(links="; ".join(lines) or ":")


def sections(out: str) -> dict[str, list[str]]:
    parts: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("== "):
            current = line[3:]
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
    assert "end" in parts, f"the container's script did not finish:\n{out}"
    return parts


def ld_cache(lines: list[str]) -> dict[str, list[str]]:
    """``ldconfig -p``: SONAME -> the paths the cache gives it."""
    cache: dict[str, list[str]] = {}
    for line in lines:
        if " => " in line:
            left, _, path = line.partition(" => ")
            cache.setdefault(left.split()[0], []).append(path.strip())
    return cache


def conf_d(lines: list[str]) -> dict[str, list[str]]:
    """The drop-ins printed by CHECK: file -> its non-comment lines."""
    files: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("/etc/ld.so.conf.d/") and line.endswith(":"):
            current = line[:-1]
            files[current] = []
        elif current is not None and line.strip() and not line.lstrip().startswith("#"):
            files[current].append(line.strip())
    return files


def check_driver_libraries_in_cache(cache: dict[str, list[str]], out: str) -> None:
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        assert f"{LIB_DIR}/{soname}" in cache.get(soname, []), f"{soname} is not in the ld cache:\n{out}"


def check_inside(out: str, links: list[tuple[str, str]], folders: list[str], image_conf_d: set[str]) -> None:
    parts = sections(out)
    cache = ld_cache(parts["ldconfig"])
    check_driver_libraries_in_cache(cache, out)
    assert cache.get("libc.so.6"), f"the image's own libraries left the ld cache:\n{out}"
    wanted = {f"{link} -> {target}" for target, link in links}
    assert wanted <= set(parts["links"]), f"missing links: {sorted(wanted - set(parts['links']))}\n{out}"
    assert any(link.endswith("/libcuda.so") and target == "libcuda.so.1" for target, link in links)
    drop_ins = conf_d(parts["conf.d"])
    ours = {name for name in drop_ins if os.path.basename(name) not in image_conf_d}
    assert ours, f"no new drop-in in /etc/ld.so.conf.d:\n{out}"
    assert all(name.endswith(".conf") for name in ours), ours  # ld.so.conf includes *.conf only
    configured = {line for lines in drop_ins.values() for line in lines}
    assert set(folders) <= configured, f"folders not in ld.so.conf.d: {set(folders) - configured}\n{out}"


# What the host must keep


def tree_digest(*roots: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``roots``: type, mode, owner, size, mtime, ctime, and content or link target."""
    listing: dict[str, tuple[object, ...]] = {}
    for root in roots:
        for directory, dirs, files in os.walk(root):
            for name in [".", *dirs, *files]:
                path = os.path.normpath(os.path.join(directory, name))
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    content: object = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                elif stat.S_ISLNK(info.st_mode):
                    content = os.readlink(path)
                else:
                    content = info.st_rdev
                listing[path] = (
                    info.st_mode,
                    info.st_uid,
                    info.st_gid,
                    info.st_size,
                    info.st_mtime_ns,
                    info.st_ctime_ns,
                    content,
                )
    return listing


def host_mounts() -> set[str]:
    """The mounts of the session's mount namespace (tests/mountns.py): only this session changes it."""
    return set(Path("/proc/self/mountinfo").read_text().splitlines())


@dataclass
class HostWatch:
    """A before/after check that the host kept its files and mounts."""

    roots: tuple[Path, ...]

    def __post_init__(self) -> None:
        self.files = tree_digest(*self.roots)
        self.mounts = host_mounts()

    def check(self) -> None:
        after = tree_digest(*self.roots)
        changed = sorted(
            path for path in self.files.keys() | after.keys() if self.files.get(path) != after.get(path)
        )
        assert not changed, f"host files changed: {changed}"
        mounts = host_mounts()
        assert mounts == self.mounts, (
            f"host mounts changed: added {sorted(mounts - self.mounts)}, removed {sorted(self.mounts - mounts)}"
        )


def host_sentinel(directory: Path) -> Path:
    directory.mkdir()
    (directory / "keep.conf").write_text("/host/only/lib\n")
    (directory / "libcuda.so").write_text("a host file, not a library\n")
    (directory / "ld.so.cache").write_text("the host's cache\n")
    (directory / "sub").mkdir()
    (directory / "sub" / "file").write_bytes(bytes(range(256)))
    return directory


def watch(tmp_path: Path, generated: Generated) -> HostWatch:
    """A host sentinel directory and the node's driver root, recorded now."""
    sentinel = host_sentinel(tmp_path / "host-sentinel")
    return HostWatch((sentinel, Path(generated.node.root)))


def run_ok(runtime: Runtime, bundle: Path) -> str:
    _, result = runtime.run(bundle)
    assert result.returncode == 0, (
        f"{runtime.name} failed ({result.returncode}): {result.stderr}{result.stdout}"
    )
    return result.stdout


# The tests


def test_generated_spec_carries_one_batch_hook(generated: Generated, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"ociVersion": "1.0.2", "process": {"args": ["true"]}, "root": {"path": "/r"}})
    )
    injected = cdictk(
        "cdi", "inject", "--spec-dir", str(generated.spec_dir), "-d", "nvidia.com/gpu=0", str(config)
    )
    assert injected.returncode == 0, injected.stderr
    hooks = json.loads(config.read_text())["hooks"]["createContainer"]
    assert len(hooks) == 1, [hook["args"][:5] for hook in hooks]
    hook = hooks[0]
    python, *flags_and_script = hook["args"][:4]
    assert hook["path"] == python and os.path.isabs(python) and os.access(python, os.X_OK)
    assert flags_and_script[:2] == ["-I", "-S"]
    assert flags_and_script[2].endswith("/cdictk/startpath/hooks/__main__.py") and os.path.isfile(
        flags_and_script[2]
    )
    assert hook["args"][4] == "batch"
    assert hook["env"] == HOOK_ENV
    assert option_values(hooks, "host-driver-version") == [V]
    assert set(option_values(hooks, "folder")) == OUR_FOLDERS


def test_hooks_prepare_the_debian_image(
    runtime: Runtime,
    debian_rootfs: Path,
    generated: Generated,
    tmp_path: Path,
) -> None:
    bundle, hooks = gpu_bundle(tmp_path / "bundle", debian_rootfs, generated.spec_dir)
    links = links_of(hooks)
    folders = option_values(hooks, "folder")
    assert links and folders, hooks
    set_script(bundle, check_script(links))
    image_conf_d = set(os.listdir(DEBIAN_ROOTFS / "etc" / "ld.so.conf.d"))
    host = watch(tmp_path, generated)

    check_inside(run_ok(runtime, bundle), links, folders, image_conf_d)
    # The same bundle again, with the container's first changes still in its rootfs: the links and the
    # drop-in exist already, and the hooks must take them as they are.
    check_inside(run_ok(runtime, bundle), links, folders, image_conf_d)
    host.check()


@pytest.mark.parametrize("debian_rootfs", ["mountpoint"], indirect=True)
def test_image_links_to_host_paths_stay_in_the_container(
    runtime: Runtime,
    debian_rootfs: Path,
    generated: Generated,
    tmp_path: Path,
) -> None:
    sentinel = host_sentinel(tmp_path / "host-sentinel")
    # An image that points where the hooks write at the host's own files, by absolute path: a hook that
    # resolved these on the host (runc runs createContainer hooks before pivot_root) would write there.
    conf_d = debian_rootfs / "etc" / "ld.so.conf.d"
    shutil.rmtree(conf_d)
    conf_d.symlink_to(sentinel)
    (debian_rootfs / "etc" / "ld.so.cache").unlink()
    (debian_rootfs / "etc" / "ld.so.cache").symlink_to(sentinel / "ld.so.cache")
    libcuda = debian_rootfs / LIB_DIR.lstrip("/") / "libcuda.so"
    assert not os.path.lexists(libcuda)
    libcuda.symlink_to(sentinel / "libcuda.so")
    host = HostWatch((sentinel, Path(generated.node.root)))

    bundle, _ = gpu_bundle(tmp_path / "bundle", debian_rootfs, generated.spec_dir)
    set_script(bundle, "ls -l /etc/ld.so.conf.d /etc/ld.so.cache; echo '== end'")
    out = run_ok(runtime, bundle)
    assert "== end" in out, out
    host.check()


def test_busybox_image_gets_the_hosts_ldconfig(
    runtime: Runtime,
    rootfs: Path,
    generated: Generated,
    tmp_path: Path,
) -> None:
    """No ldconfig, no ld.so.conf, no glibc in the image: the ld cache can only come from the host's ldconfig."""
    image = tmp_path / "busybox"
    shutil.copytree(rootfs, image, symlinks=True)
    assert not any((image / d / "ldconfig").exists() for d in ("sbin", "usr/sbin", "bin", "usr/bin"))
    assert not (image / "etc" / "ld.so.conf").exists()
    bundle, hooks = gpu_bundle(tmp_path / "bundle", image, generated.spec_dir)
    links = links_of(hooks)
    lines = [f'echo {shlex.quote(link)} "-> $(readlink {shlex.quote(link)})"' for _, link in links]
    set_script(bundle, "; ".join([*lines, "echo '== end'"]))
    host = watch(tmp_path, generated)

    out = run_ok(runtime, bundle)
    assert "== end" in out, out
    for target, link in links:
        assert f"{link} -> {target}" in out.splitlines(), out
    assert run_ok(runtime, bundle) == out  # and again, on the rootfs the first run prepared
    cache_file = image / "etc" / "ld.so.cache"
    assert cache_file.is_file() and not cache_file.is_symlink(), f"no ld cache was written:\n{out}"
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    printed = subprocess.run(
        [ldconfig, "-p", "-C", str(cache_file)], capture_output=True, text=True, check=True
    )
    check_driver_libraries_in_cache(ld_cache(printed.stdout.splitlines()), printed.stdout)
    host.check()
