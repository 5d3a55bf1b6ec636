"""The driver's other files: binaries, GSP firmware, IPC sockets, config files and Xorg modules.

Each is looked up under the driver root and reported with the path it gets in the container. All of them
are optional: what is missing is reported by name so that the caller can summarise it in one warning.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from cdictk.startpath.helpers.roots import Roots, join, read_text, resolve

BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")  # on PATH
# Where driver trees keep their programs off the default PATH: GKE's /usr/local/nvidia (its /usr/bin holds
# wrapper scripts that exec these), and bin/ beside a library directory of the driver (see binary_dirs).
DRIVER_BIN_DIRS = ("/usr/local/nvidia/bin",)
FIRMWARE_DIR = "/lib/firmware"  # in the container: the kernel's default, a real path on every image
ELF_MAGIC = b"\x7fELF"
SOCKETS = (
    ("/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"),
    ("/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"),
)
MPS_PIPE_DIR = "/tmp/nvidia-mps"  # noqa: S108 (the MPS daemon's own default, shared, never created here)
CONFIG_SEARCH_DIRS = ("/etc", "/usr/local/share", "/usr/share")
CONFIG_FILES = (
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/09_nvidia_wayland2.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "egl/egl_external_platform.d/20_nvidia_xcb.json",
    "egl/egl_external_platform.d/20_nvidia_xlib.json",
    "nvidia/nvoptix.bin",
    "X11/xorg.conf.d/10-nvidia.conf",
    "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
    "vulkan/icd.d/nvidia_icd.json",
    f"vulkan/icd.d/nvidia_icd.{os.uname().machine}.json",
    "vulkan/icd.d/nvidia_layers.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
    "OpenCL/vendors/nvidia.icd",
)
XORG_SUBDIRS = (
    "nvidia/xorg",
    "xorg/modules/drivers",
    "xorg/modules/extensions",
    "xorg/modules/updates/drivers",
    "xorg/modules/updates/extensions",
)


class FileKind(Enum):
    BINARY = "binary"
    FIRMWARE = "firmware"
    CONFIG = "config"
    XORG = "xorg module"
    SOCKET = "IPC socket"
    DIRECTORY = "IPC directory"
    PLATFORM = "platform file"  # read-only: a WSL driver store's, a Jetson CSV file's, GDS's config


@dataclass(frozen=True, slots=True)
class DriverFile:
    path: str  # in the container
    host_path: str
    kind: FileKind
    via: tuple[str, ...] = ()  # the host paths of the symlinks followed to host_path


@dataclass(slots=True)
class Found:
    files: list[DriverFile] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (target as written, link path)
    missing: list[str] = field(default_factory=list)


def _lstat_mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _in_root(
    roots: Roots, path: str, is_kind: Callable[[int], bool], via: list[str] | None = None
) -> str | None:
    """The host path of what ``path`` names in the driver root (symlinks followed inside the root), if
    it is of the kind ``is_kind`` tests for. Never a host path reached through an absolute link.
    ``via`` gets the links followed: whoever owns one chose the result (a user's ``/tmp/nvidia-mps``
    linked to ``/etc``), so they are checked with it
    (:func:`cdictk.nvcdi.nodespec.leave_out_foreign_paths`)."""
    real = resolve(roots.driver, path, via)
    if real is None:
        return None
    host = join(roots.driver, real)
    return host if is_kind(_lstat_mode(host)) else None


def _regular_in_root(roots: Roots, path: str, via: list[str] | None = None) -> str | None:
    return _in_root(roots, path, stat.S_ISREG, via)


def _list_in_root(roots: Roots, directory: str, via: list[str] | None = None) -> tuple[str, list[str]]:
    """``directory`` resolved inside the driver root and its entries' names (none when it is missing)."""
    real = resolve(roots.driver, directory, via)
    if real is None:
        return directory, []
    try:
        return real, sorted(os.listdir(join(roots.driver, real)))
    except OSError:
        return real, []


def tree_dirs(lib_dirs: list[str], name: str) -> list[str]:
    """``name`` (bin, share, firmware) beside each ``lib`` or ``lib64`` directory of the driver: how a
    driver tree of its own lays itself out (GKE's /usr/local/nvidia/{bin,lib64,share,firmware}, the same
    tree given as the driver root: /bin, /lib64, ...)."""
    dirs: list[str] = []
    for directory in lib_dirs:
        if os.path.basename(directory) in ("lib", "lib64"):
            beside = os.path.join(os.path.dirname(directory), name)
            if beside not in dirs:
                dirs.append(beside)
    return dirs


def binary_dirs(lib_dirs: list[str]) -> list[str]:
    """Where the driver's programs may be: the PATH directories, then the driver trees' own
    (:data:`DRIVER_BIN_DIRS`, and ``bin`` beside a ``lib`` or ``lib64`` directory of the driver)."""
    dirs = [*BINARY_DIRS, *DRIVER_BIN_DIRS]
    return dirs + [directory for directory in tree_dirs(lib_dirs, "bin") if directory not in dirs]


def find_binaries(roots: Roots, found: Found, lib_dirs: list[str] | None = None) -> None:
    """The driver's programs: for each, the first ELF file of that name (a wrapper script, as GKE puts
    on PATH, would exec a path the container lacks). One found off PATH is mounted at ``/usr/bin``,
    where every image's PATH finds it."""
    for name in BINARIES:
        scripts = []
        for directory in binary_dirs(lib_dirs or []):
            via: list[str] = []
            host = _regular_in_root(roots, f"{directory}/{name}", via)
            if host is None:
                continue
            if not _is_elf(host):
                scripts.append(f"{directory}/{name}")
                continue
            path = f"{directory}/{name}" if directory in BINARY_DIRS else f"/usr/bin/{name}"
            found.files.append(DriverFile(path, host, FileKind.BINARY, tuple(via)))
            break
        else:
            found.missing.append(f"{name} (only {scripts[0]}, not an ELF program)" if scripts else name)


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(4) == ELF_MAGIC
    except OSError:
        return False


def firmware_dirs(roots: Roots, lib_dirs: list[str] | None = None) -> list[str]:
    """Where the kernel's firmware loader looks (a custom path first), then ``firmware`` beside the
    driver's library directories (GKE's /usr/local/nvidia/firmware, which its custom path names on the
    host but which a driver root at /usr/local/nvidia sees as /firmware)."""
    release = os.uname().release  # the host kernel's: firmware is loaded by this kernel
    dirs = []
    custom = (read_text(roots.in_sys("module/firmware_class/parameters/path")) or "").strip()
    if custom.startswith("/"):
        dirs.append(custom)
    dirs += [
        f"/lib/firmware/updates/{release}",
        "/lib/firmware/updates",
        f"/lib/firmware/{release}",
        "/lib/firmware",
    ]
    return dirs + [directory for directory in tree_dirs(lib_dirs or [], "firmware") if directory not in dirs]


def find_firmware(roots: Roots, version: str, found: Found, lib_dirs: list[str] | None = None) -> None:
    """``nvidia/<version>/gsp*.bin``, searched where the kernel's firmware loader searches."""
    taken: set[str] = set()
    for directory in firmware_dirs(roots, lib_dirs):
        dir_via: list[str] = []
        where, names = _list_in_root(roots, f"{directory}/nvidia/{version}", dir_via)
        for name in names:
            if name.startswith("gsp") and name.endswith(".bin") and name not in taken:
                via = list(dir_via)
                host = _regular_in_root(roots, f"{where}/{name}", via)
                if host is not None:
                    taken.add(name)
                    # Where the image's tools look whatever the host's layout (merged /usr or not,
                    # a custom firmware path): /lib/firmware, as NVIDIA mounts it.
                    container = f"{FIRMWARE_DIR}/nvidia/{version}/{name}"
                    found.files.append(DriverFile(container, host, FileKind.FIRMWARE, tuple(via)))
    if not taken:
        found.missing.append(f"GSP firmware for {version}")


def find_ipc(roots: Roots, found: Found, mps_pipe_dir: str = MPS_PIPE_DIR) -> None:
    """The persistenced and fabricmanager sockets and the MPS pipe directory, when their daemons run."""
    for candidates in SOCKETS:
        for path in candidates:
            via: list[str] = []
            host = _in_root(roots, path, stat.S_ISSOCK, via)
            if host is not None:
                found.files.append(DriverFile(path, host, FileKind.SOCKET, tuple(via)))
                break
    via = []
    host = _in_root(roots, mps_pipe_dir, stat.S_ISDIR, via)
    if host is not None:
        found.files.append(DriverFile(mps_pipe_dir, host, FileKind.DIRECTORY, tuple(via)))


def find_configs(roots: Roots, found: Found, lib_dirs: list[str] | None = None) -> None:
    """Vulkan, EGL, GLVND, OpenCL, OptiX and Xorg config files, each at the first place it is found.

    In ``/etc``, ``/usr/local/share`` or ``/usr/share`` a file keeps its path: the loaders search all
    three in every image. In a driver tree's own ``share`` (GKE's /usr/local/nvidia/share) it goes where
    the image's loaders look: ``/etc`` for the OpenCL ICD loader, which reads nothing else, and
    ``/usr/share`` for the others.
    """
    trees = [
        directory for directory in tree_dirs(lib_dirs or [], "share") if directory not in CONFIG_SEARCH_DIRS
    ]
    for relative in CONFIG_FILES:
        for directory in (*CONFIG_SEARCH_DIRS, *trees):
            path = f"{directory}/{relative}"
            via: list[str] = []
            host = _regular_in_root(roots, path, via)
            if host is None:
                continue
            if directory in trees:
                path = f"/etc/{relative}" if relative.startswith("OpenCL/") else f"/usr/share/{relative}"
            found.files.append(DriverFile(path, host, FileKind.CONFIG, tuple(via)))
            break


def find_xorg_modules(roots: Roots, version: str, lib_dirs: list[str], found: Found) -> None:
    wanted = {"nvidia_drv.so", f"libglxserver_nvidia.so.{version}"}
    bases = [*lib_dirs, "/usr/lib", "/usr/lib64", "/usr/X11R6/lib", "/usr/X11R6/lib64"]
    seen: set[str] = set()
    for base in bases:
        for sub in XORG_SUBDIRS:
            where, names = _list_in_root(roots, f"{base}/{sub}")
            for name in names:
                path = f"{where}/{name}"
                mode = _lstat_mode(join(roots.driver, path))
                if name in wanted and name not in seen and stat.S_ISREG(mode):
                    seen.add(name)
                    found.files.append(DriverFile(path, join(roots.driver, path), FileKind.XORG))
                elif stat.S_ISLNK(mode) and os.path.basename(resolve(roots.driver, path) or "") in wanted:
                    found.links.append((os.readlink(join(roots.driver, path)), path))
