"""enable-cuda-compat, on libraries built with gcc and on hostile rootfs trees (its ELF note reader:
test_elfnote.py)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks import cudacompat
from cdictk.startpath.hooks.cudacompat import COMPAT_CONF, compat_applies, enable_cuda_compat, parse_version
from tests import REPO
from tests.unit.startpath.hooks.cudalibs import Libs, build_libs

COMPAT = "usr/local/cuda/compat"
LIB = "libcuda.so.570.124.06"


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Libs:
    return build_libs(tmp_path_factory)


# Versions and the decision table


def test_parse_version() -> None:
    assert parse_version("570.124.06") == (570, 124, 6)
    assert parse_version("12.8") == (12, 8)
    assert parse_version("570") == (570,)
    assert parse_version("570", min_parts=2) is None
    # "\u00b2" (superscript two) and Arabic-Indic digits pass str.isdigit(); the first one fails int().
    bad_versions = ("", ".", "570.", ".1", "570..1", "570.1a", "57 0", "-1.2", "+1.2", "1_0.2", "\u00b2.1")
    for bad in (*bad_versions, "\u0665\u0667\u0660.1", "1" * 10, "1." * 8 + "1", "1" * 65):
        assert parse_version(bad) is None, bad
    assert parse_version("1.2.3.4.5.6.7.8") == (1, 2, 3, 4, 5, 6, 7, 8)


DRIVERS_535_570 = ((535, 550, 570), (12, 8))


@pytest.mark.parametrize(
    ("compat", "note", "driver", "cuda", "expected"),
    [
        # With a note and a host driver: major listed and the compat library newer.
        ((570, 124, 6), DRIVERS_535_570, (550, 54, 15), None, True),
        ((570, 124, 6), DRIVERS_535_570, (535, 230, 2), None, True),
        ((570, 124, 6), DRIVERS_535_570, (545, 23, 8), None, False),  # 545 not listed
        ((570, 124, 6), DRIVERS_535_570, (570, 124, 6), None, False),  # same version
        ((570, 124, 6), DRIVERS_535_570, (570, 133, 20), None, False),  # host newer
        ((570, 124, 6), DRIVERS_535_570, (570, 86, 10), None, True),  # same major, compat newer
        ((570, 124, 6), DRIVERS_535_570, (575, 51, 3), None, False),
        ((570, 124, 6), DRIVERS_535_570, (550, 54, 15), (12, 4), True),  # the driver rule wins
        # With a note and only a host CUDA version.
        ((570, 124, 6), DRIVERS_535_570, None, (12, 4), True),
        ((570, 124, 6), DRIVERS_535_570, None, (12, 8), False),
        ((570, 124, 6), DRIVERS_535_570, None, (12, 9), False),
        ((570, 124, 6), DRIVERS_535_570, None, (12, 8, 1), False),
        ((570, 124, 6), DRIVERS_535_570, None, (11,), True),
        # Without a note: majors only.
        ((570, 124, 6), None, (550, 54, 15), None, True),
        ((570, 124, 6), None, (570, 10), None, False),
        ((570, 124, 6), None, (575, 51, 3), None, False),
        ((570, 124, 6), None, None, (12, 4), False),  # nothing to compare a CUDA version with
        ((570, 124, 6), None, (550, 54, 15), (12, 4), True),
    ],
)
def test_decision_table(
    compat: tuple[int, ...],
    note: tuple[tuple[int, ...], tuple[int, ...]] | None,
    driver: tuple[int, ...] | None,
    cuda: tuple[int, ...] | None,
    expected: bool,
) -> None:
    assert compat_applies(compat, note, driver, cuda) is expected


# The hook on rootfs trees


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def use_openat2(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    (root / COMPAT).mkdir(parents=True)
    (root / "etc").mkdir()
    return root


def _run(root: Path, driver: str | None, cuda: str | None = None, *, openat2: bool = True, **kw: str) -> bool:
    with Rootfs(str(root), use_openat2=openat2) as rootfs:
        return enable_cuda_compat(rootfs, driver, cuda, **kw)


def _conf(root: Path) -> Path:
    return root / COMPAT_CONF.lstrip("/")


def _install(root: Path, lib: Path, name: str = LIB, where: str = COMPAT) -> None:
    shutil.copyfile(lib, root / where / name)
    (root / where / "libcuda.so.1").symlink_to(name)


class Blocked(Exception):
    """Not an OSError: the code under test must not be able to swallow it."""


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Turn a blocking open (of a FIFO, say) into a failure instead of a stuck test run."""

    def expire(signum: int, frame: object) -> None:
        raise Blocked("enable_cuda_compat blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_nothing_happens_without_host_versions(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    assert _run(root, None) is False
    assert _run(root, "", "") is False
    assert not (root / "etc/ld.so.conf.d").exists()


def test_writes_the_conf_once_and_a_second_run_changes_nothing(
    libs: Libs, tmp_path: Path, use_openat2: bool
) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    umask = os.umask(0o077)  # the mode must not depend on the umask
    try:
        assert _run(root, "550.54.15", openat2=use_openat2) is True
    finally:
        os.umask(umask)
    conf = _conf(root)
    assert conf.read_text() == "/usr/local/cuda/compat\n"
    first = conf.stat()
    assert stat.S_IMODE(first.st_mode) == 0o644
    assert _run(root, "550.54.15", openat2=use_openat2) is True
    second = conf.stat()
    assert (second.st_ino, second.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    assert sorted(os.listdir(conf.parent)) == [conf.name]  # no temporary files left behind


def test_the_note_decides_when_there_is_one(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.old_drivers)  # the note lists only 535: a 550 host may not use it
    assert _run(root, "550.54.15") is False
    assert not _conf(root).exists()
    assert _run(root, "535.230.02") is True


def test_host_cuda_version_only(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    assert _run(root, None, "12.4") is True
    assert _run(root, None, "12.8") is False
    assert not _conf(root).exists()  # removed again: it no longer applies
    plain = _rootfs(tmp_path / "plain")
    _install(plain, libs.plain)
    assert _run(plain, None, "12.4") is False


@pytest.mark.parametrize("lib", ["plain", "bad_json", "other_owner", "padded", "script"])
def test_without_a_usable_note_the_majors_decide(libs: Libs, tmp_path: Path, lib: str) -> None:
    root = _rootfs(tmp_path)
    if lib == "script":
        (root / COMPAT / LIB).write_text("INPUT(libcuda.so.1)\n")  # not ELF at all
    else:
        _install(root, getattr(libs, lib))
    # The padded note is usable: it must decide like the normal one (545 is not listed).
    assert _run(root, "545.23.08") is (lib != "padded")
    assert _run(root, "575.51.03") is False
    assert _run(root, "550.54.15") is True


def test_a_stale_conf_goes_when_the_host_driver_caught_up(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    assert _run(root, "550.54.15") is True
    assert _conf(root).exists()
    assert _run(root, "575.51.03") is False
    assert not _conf(root).exists()
    assert _run(root, "575.51.03") is False  # and nothing to remove is no error


def test_only_one_regular_file_counts(libs: Libs, tmp_path: Path, no_hang: None) -> None:
    root = _rootfs(tmp_path)
    compat = root / COMPAT
    _install(root, libs.note)
    os.mkfifo(compat / "libcuda.so.999.1")  # opening it for reading would block
    (compat / "libcuda.so.998.1").mkdir()
    (compat / "libcuda.so.997.1.1").symlink_to(LIB)
    for name in (
        "libcuda.so.996",
        "libcuda.so.996.1.bak",
        "libcuda.so.\uff19\uff19\uff16.1",
        "libcuda.so.996.-1",
        "xlibcuda.so.996.1",
    ):
        shutil.copyfile(libs.note, compat / name)
    if os.geteuid() == 0:
        os.mknod(compat / "libcuda.so.995.1", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        print("not root: the device-node case is left out")
    assert _run(root, "550.54.15") is True


def test_two_candidates_mean_no_compat(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    shutil.copyfile(libs.note, root / COMPAT / "libcuda.so.575.51.03")
    assert _run(root, "550.54.15") is False
    assert not _conf(root).exists()


def test_a_fifo_alone_neither_hangs_nor_counts(tmp_path: Path, no_hang: None) -> None:
    root = _rootfs(tmp_path)
    os.mkfifo(root / COMPAT / "libcuda.so.999.1")
    assert _run(root, "550.54.15") is False


def test_no_compat_directory(tmp_path: Path, use_openat2: bool) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    assert _run(root, "550.54.15", openat2=use_openat2) is False
    (root / "usr/local").mkdir(parents=True)
    (root / "usr/local/cuda").write_text("a file, not a directory")
    assert _run(root, "550.54.15", openat2=use_openat2) is False
    (root / "usr/local/cuda").unlink()
    (root / "usr/local/cuda").symlink_to("cuda")  # a loop
    assert _run(root, "550.54.15", openat2=use_openat2) is False


def test_a_symlink_to_a_host_library_does_not_count(libs: Libs, tmp_path: Path, use_openat2: bool) -> None:
    host_lib = tmp_path / "host" / LIB
    host_lib.parent.mkdir()
    shutil.copyfile(libs.note, host_lib)
    root = _rootfs(tmp_path)
    (root / COMPAT / LIB).symlink_to(host_lib)
    assert _run(root, "550.54.15", openat2=use_openat2) is False
    shutil.copyfile(libs.note, root / COMPAT / "libcuda.so.570.1")  # the link still does not count
    assert _run(root, "550.54.15", openat2=use_openat2) is True


def test_directory_links_resolve_inside_the_rootfs(libs: Libs, tmp_path: Path, use_openat2: bool) -> None:
    host_cuda = tmp_path / "host-cuda"
    (host_cuda / "compat").mkdir(parents=True)
    shutil.copyfile(libs.note, host_cuda / "compat" / LIB)
    root = tmp_path / "rootfs"
    (root / "usr/local").mkdir(parents=True)
    cuda = root / "usr/local/cuda"
    for target in (str(host_cuda), "../../../../../../../../../../.." + str(host_cuda)):
        cuda.symlink_to(target)
        assert _run(root, "550.54.15", openat2=use_openat2) is False, target
        cuda.unlink()
    # "/usr/local/cuda -> /" means the rootfs's own /compat.
    cuda.symlink_to("/")
    (root / "compat").mkdir()
    _install(root, libs.note, where="compat")
    assert _run(root, "550.54.15", openat2=use_openat2) is True
    assert _conf(root).read_text() == "/usr/local/cuda/compat\n"


def test_the_conf_stays_inside_the_rootfs(libs: Libs, tmp_path: Path, use_openat2: bool) -> None:
    host_dir = tmp_path / "host-ld.so.conf.d"
    host_dir.mkdir()
    (host_dir / "host.conf").write_text("/host\n")
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    (root / "etc/ld.so.conf.d").symlink_to(host_dir)
    # The link's target is made inside the rootfs and receives the file; the host dir never does.
    assert _run(root, "550.54.15", openat2=use_openat2) is True
    inside = root / str(host_dir).lstrip("/")
    assert (inside / Path(COMPAT_CONF).name).read_text() == "/usr/local/cuda/compat\n"
    assert os.listdir(host_dir) == ["host.conf"]
    # A stale conf to remove is looked for inside the rootfs too.
    (host_dir / Path(COMPAT_CONF).name).write_text("host file\n")
    assert _run(root, "575.51.03", openat2=use_openat2) is False
    assert not (inside / Path(COMPAT_CONF).name).exists()
    assert (host_dir / Path(COMPAT_CONF).name).read_text() == "host file\n"


def test_a_planted_conf_symlink_is_replaced_not_followed(libs: Libs, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host data\n")
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    (root / "etc/ld.so.conf.d").mkdir()
    _conf(root).symlink_to(victim)
    assert _run(root, "550.54.15") is True
    assert not _conf(root).is_symlink()
    assert victim.read_text() == "host data\n"


def test_custom_compat_root(libs: Libs, tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "opt/compat").mkdir(parents=True)
    _install(root, libs.note, where="opt/compat")
    assert _run(root, "550.54.15", compat_root="//opt//compat/") is True
    assert _conf(root).read_text() == "/opt/compat\n"


@pytest.mark.parametrize(
    ("driver", "cuda", "root", "message"),
    [
        ("550.54.15x", None, "/usr/local/cuda/compat", "--host-driver-version"),
        ("550.54.15\n", None, "/usr/local/cuda/compat", "--host-driver-version"),
        (None, "twelve", "/usr/local/cuda/compat", "--host-cuda-version"),
        ("550.54.15", None, "relative/compat", "--cuda-compat-container-root"),
        ("550.54.15", None, "/a\n/etc", "--cuda-compat-container-root"),
        ("550.54.15", None, "/a b", "--cuda-compat-container-root"),
        ("550.54.15", None, "/a#b", "--cuda-compat-container-root"),
    ],
)
def test_bad_arguments(tmp_path: Path, driver: str | None, cuda: str | None, root: str, message: str) -> None:
    rootfs = _rootfs(tmp_path)
    with pytest.raises(HookError, match=message) as caught:
        _run(rootfs, driver, cuda, compat_root=root)
    assert "\n" not in str(caught.value).replace("\\n", "")


def test_import_cost() -> None:
    forbidden = ("typing", "dataclasses", "re", "json", "subprocess", "enum", "argparse")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import cdictk.startpath.hooks.cudacompat\n"
        f"print(','.join(m for m in {forbidden!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
    assert cudacompat.COMPAT_CONF.startswith("/etc/ld.so.conf.d/00-")


def test_a_failed_reopen_is_an_error_not_a_silent_no(
    libs: Libs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    real_open = os.open

    def no_proc(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if str(path).startswith("/proc/self/fd/"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", no_proc)
    with pytest.raises(HookError, match=f"cannot open {LIB} in the container: Permission denied"):
        _run(root, "550.54.15", openat2=False)
