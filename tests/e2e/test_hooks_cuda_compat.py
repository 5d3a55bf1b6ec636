"""CUDA forward compatibility, end to end: runc and crun run a generated spec's hook on a Debian image
that ships ``/usr/local/cuda/compat/libcuda.so.<version>``, a gcc-built library with the
``.note.cuda.fwd_compatibility`` note that real compat libraries carry.

The fake node's driver is 580.95.05. A compat libcuda newer than that, whose note lists driver major
580, must win: the hook writes ``00-cdictk-cuda-compat.conf`` and the ld cache the same hook rebuilds
gives ``libcuda.so.1`` from the compat folder before the driver's. An older one (575.x) must not: no
compat drop-in, and ``libcuda.so.1`` comes from the driver's folder first. As in real CUDA images, the
compat folder also holds the SONAME link ``libcuda.so.1`` (what ``ldconfig -p`` lists), which the hook
must not count as a second compat library.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e import test_hooks
from tests.e2e.conftest import Runtime
from tests.e2e.test_hooks import (
    Generated,
    check_driver_libraries_in_cache,
    check_script,
    conf_d,
    gpu_bundle,
    ld_cache,
    option_values,
    run_ok,
    sections,
    set_script,
    watch,
)
from tests.fakenode.node import LIB_DIR
from tests.unit.startpath.hooks.cudalibs import OWNER, _gcc, _note_source

pytestmark = pytest.mark.root

# The module-scoped fake "single" node and its generated spec, as tests/e2e/test_hooks.py makes them.
generated = test_hooks.generated

HOST_DRIVER = test_hooks.V  # 580.95.05
COMPAT_DIR = "/usr/local/cuda/compat"
COMPAT_CONF = "/etc/ld.so.conf.d/00-cdictk-cuda-compat.conf"
NEWER = "580.126.09"
OLDER = "575.57.08"


def compat_note(cuda: str, drivers: list[int]) -> bytes:
    return json.dumps({"Format": 1, "CUDA Version": cuda, "Driver": drivers, "Device": []}).encode()


def add_compat_libcuda(rootfs: Path, version: str, note: bytes, build_dir: Path) -> None:
    """``libcuda.so.<version>`` (SONAME libcuda.so.1, with the note) and its SONAME link in the image."""
    if shutil.which("gcc") is None:
        print("gcc is not installed (tests/setup-host.sh installs it): no compat libcuda can be built")
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    build_dir.mkdir()
    built = _gcc(build_dir, f"libcuda.so.{version}", _note_source(OWNER, note))
    compat = rootfs / COMPAT_DIR.lstrip("/")
    compat.mkdir(parents=True)
    shutil.copy2(built, compat / built.name)
    (compat / "libcuda.so.1").symlink_to(built.name)


def compat_bundle(rootfs: Path, generated: Generated, tmp_path: Path) -> Path:
    bundle, hooks = gpu_bundle(tmp_path / "bundle", rootfs, generated.spec_dir)
    # The spec asks for compat with the node's driver version, and the ld cache of the driver's folder.
    assert option_values(hooks, "host-driver-version") == [HOST_DRIVER], hooks
    assert LIB_DIR in option_values(hooks, "folder"), hooks
    set_script(bundle, check_script([]))
    return bundle


def inside(out: str) -> tuple[list[str], dict[str, list[str]]]:
    """What the container showed: the ld cache's paths for libcuda.so.1, in cache order, and the drop-ins."""
    parts = sections(out)
    cache = ld_cache(parts["ldconfig"])
    check_driver_libraries_in_cache(cache, out)
    return cache["libcuda.so.1"], conf_d(parts["conf.d"])


def compat_confs(drop_ins: dict[str, list[str]]) -> list[str]:
    """The drop-ins that name the compat folder."""
    return sorted(name for name, lines in drop_ins.items() if COMPAT_DIR in lines)


@pytest.mark.parametrize("debian_rootfs", ["mountpoint"], indirect=True)
def test_newer_compat_libcuda_comes_first(
    runtime: Runtime,
    debian_rootfs: Path,
    generated: Generated,
    tmp_path: Path,
) -> None:
    add_compat_libcuda(debian_rootfs, NEWER, compat_note("13.1", [535, 550, 570, 575, 580]), tmp_path / "gcc")
    bundle = compat_bundle(debian_rootfs, generated, tmp_path)
    host = watch(tmp_path, generated)

    # The same container twice: the second start finds the first one's drop-in and keeps just that one.
    for start in ("first", "second"):
        out = run_ok(runtime, bundle)
        libcuda, drop_ins = inside(out)
        where = f"{runtime.name}, {start} start:\n{out}"
        assert libcuda[0] == f"{COMPAT_DIR}/libcuda.so.1", (
            f"libcuda.so.1 is not the compat one first: {where}"
        )
        assert f"{LIB_DIR}/libcuda.so.1" in libcuda[1:], where
        assert drop_ins.get(COMPAT_CONF) == [COMPAT_DIR], where
        assert compat_confs(drop_ins) == [COMPAT_CONF], where
    on_disk = debian_rootfs / COMPAT_CONF.lstrip("/")
    assert on_disk.read_text() == f"{COMPAT_DIR}\n"
    assert sorted(p.name for p in on_disk.parent.glob("*cuda-compat*")) == [on_disk.name]
    host.check()


@pytest.mark.parametrize("debian_rootfs", ["mountpoint"], indirect=True)
def test_older_compat_libcuda_is_left_out(
    runtime: Runtime,
    debian_rootfs: Path,
    generated: Generated,
    tmp_path: Path,
) -> None:
    # The note even lists driver 580: only the library's version, older than the driver, says no.
    add_compat_libcuda(debian_rootfs, OLDER, compat_note("12.9", [535, 550, 570, 575, 580]), tmp_path / "gcc")
    bundle = compat_bundle(debian_rootfs, generated, tmp_path)
    host = watch(tmp_path, generated)

    out = run_ok(runtime, bundle)
    libcuda, drop_ins = inside(out)
    where = f"{runtime.name}:\n{out}"
    assert libcuda[0] == f"{LIB_DIR}/libcuda.so.1", f"libcuda.so.1 is not the driver's first: {where}"
    assert not any(path.startswith(f"{COMPAT_DIR}/") for path in libcuda), where
    assert COMPAT_CONF not in drop_ins and compat_confs(drop_ins) == [], where
    assert not (debian_rootfs / COMPAT_CONF.lstrip("/")).exists()
    host.check()
