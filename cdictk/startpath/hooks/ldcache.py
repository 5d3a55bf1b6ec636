"""The ``update-ldcache`` hook: make the container's dynamic linker find the injected driver libraries.

nvidia-cdi-hook compatible: the requested folders go into an ld.so.conf.d drop-in, the container's own
system library folders into another, and the container's ``/etc/ld.so.cache`` and SONAME links are
rebuilt. cdictk writes them itself (:mod:`cdictk.startpath.hooks.ldconf`,
:mod:`cdictk.startpath.hooks.ldscan`, :mod:`cdictk.startpath.hooks.ldsocache`): the bytes and links the
image's own glibc ldconfig would write (its release read from the image by
:mod:`cdictk.startpath.hooks.ldrelease`), without starting a process, and nothing of the image is run or
parsed by anything but this code. Only an image that asks for what the writer leaves to ldconfig (glibc-hwcaps
or legacy hwcap subdirectories, ``dir=type`` lines, include cycles) gets the host's ldconfig, sandboxed, which
writes its own release's format.

Safer than nvidia-cdi-hook in three ways. The files are written from the hook process through
:class:`~cdictk.startpath.helpers.rootfs.Rootfs`, which resolves every path inside the rootfs. ldconfig runs
in :mod:`cdictk.startpath.hooks.sandbox`, which also works when the rootfs is a plain directory and removes
the procfs mounts whose magic links lead back to the host. And the drop-ins have fixed names, so a second
run changes nothing but the cache.

ldconfig opens whatever the image's configuration names without looking at it first, so a FIFO there
would stall it: the one walk of the configuration (:func:`cdictk.startpath.hooks.ldconf.read`) refuses one
before anything runs, and ldconfig runs under a deadline that fits a container start, which also ends
what the walk cannot foresee (includes that multiply, wildcards in directory names, a FIFO behind a
library's symlink).

Musl images have no ld.so.cache: there the folders are added to ``/etc/ld-musl-<arch>.path`` and
no cache is written.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.bundlepaths import bundled_ldconfig
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks import hostbinary, ldconf, ldrelease
from cdictk.startpath.hooks.steps import DEFAULT_LDCONFIG, Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from cdictk.startpath.helpers.rootfs import Rootfs

HOOK = "update-ldcache"
LD_SO_CONF = "/etc/ld.so.conf"
LD_SO_CONF_DEFAULT = b"include /etc/ld.so.conf.d/*.conf\n"
# "05-" sorts after the CUDA compat hook's "00-" drop-in, so a forward-compatible libcuda still wins.
DRIVER_CONF = "/etc/ld.so.conf.d/05-cdictk-driver.conf"
SYSTEM_CONF = "/etc/ld.so.conf.d/zz-cdictk-system.conf"
LD_SO_CACHE = "/etc/ld.so.cache"
LDCONFIG_ARGV = ("ldconfig", "-f", LD_SO_CONF, "-C", LD_SO_CACHE)
CACHE_MODE = 0o644
# What a cache names as its writer when the image had none to copy the name from.
GENERATOR = b"cdictk hook update-ldcache (ldconfig's format)"
CONF_MODE = 0o644
# Far above what a sandboxed run takes, even on a cold page cache with thousands of libraries
# (bench/README.md), and a bound on what an image that makes it walk forever adds to a start.
LDCONFIG_TIMEOUT = 2.0
MAX_OLD_CACHE = 64 << 20  # the image's cache, read for its writer's name and, before 2.33, its format

# Debian's multiarch triplets, by `uname -m`.
_TRIPLETS = {
    "x86_64": "x86_64-linux-gnu",
    "aarch64": "aarch64-linux-gnu",
    "ppc64le": "powerpc64le-linux-gnu",
    "s390x": "s390x-linux-gnu",
    "riscv64": "riscv64-linux-gnu",
}
# musl's name for the architecture, in /lib/ld-musl-<arch>.so.1 and /etc/ld-musl-<arch>.path.
_MUSL_ARCHES = {
    "x86_64": "x86_64",
    "aarch64": "aarch64",
    "ppc64le": "powerpc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
# musl's built-in search path, which a path file replaces rather than extends.
_MUSL_DEFAULT_PATH = ("/lib", "/usr/local/lib", "/usr/lib")
_MAX_MUSL_PATH_FILE = 64 << 10


def update_ldcache(
    rootfs: Rootfs,
    folders: list[str],
    ldconfig_path: str = "/sbin/ldconfig",
    *,
    timeout: float = LDCONFIG_TIMEOUT,
    ldconfig: int | None = None,
) -> None:
    """Add ``folders`` to the container's library search path and rebuild its ld.so.cache.

    ``ldconfig``: the sealed copy :func:`load_ldconfig` made, when the caller checked it before
    changing anything else (the batched hook); it is closed here. Idempotent: a second run rewrites
    only the cache. Any failure is a :class:`HookError`.
    """
    try:
        _update(rootfs, folders, ldconfig_path, timeout, ldconfig)
    finally:
        if ldconfig is not None:
            os.close(ldconfig)


def _update(
    rootfs: Rootfs, folders: list[str], ldconfig_path: str, timeout: float, ldconfig: int | None
) -> None:
    _refuse_host_root(rootfs)
    folders = checked_folders(folders)
    machine = os.uname().machine
    musl_arch = _musl_arch(rootfs, machine)
    if musl_arch is not None:
        _update_musl_path(rootfs, musl_arch, folders)
        return
    # The host binary is checked before anything in the container changes.
    exe = load_ldconfig(ldconfig_path) if ldconfig is None else os.dup(ldconfig)
    try:
        triplet = _debian_triplet(rootfs, machine)
        _write_confs(rootfs, folders, triplet)
        old = _read_optional(rootfs, LD_SO_CACHE, MAX_OLD_CACHE)
        release = ldrelease.release_for(
            rootfs, _libc_dirs(triplet), debian=triplet is not None, old_cache=old
        )
        try:
            # A FIFO or device node among the configuration files is refused here, before ldconfig
            # could block on it.
            conf = ldconf.read(rootfs, LD_SO_CONF, hwcap_lines=release.hwcap_lines)
        except HookError as exc:
            raise HookError(f"{HOOK}: {exc}") from None
        if conf.unsupported is None and _write_cache(rootfs, conf.dirs, triplet, release, old):
            return
        from cdictk.startpath.hooks import sandbox  # noqa: PLC0415 - only for the images the writer hands back

        try:
            sandbox.run_in_rootfs(rootfs, exe, LDCONFIG_ARGV, timeout=timeout, what="ldconfig")
        except HookError as exc:
            raise HookError(f"{HOOK}: {exc}") from None
    finally:
        os.close(exe)


def _write_cache(
    rootfs: Rootfs, dirs: list[str], triplet: str | None, release: ldrelease.Release, old: bytes | None
) -> bool:
    """Write the cache, and change the links, as the image's ldconfig would, without running it; False
    when the image needs something only ldconfig does (:class:`ldscan.Unsupported`)."""
    from cdictk.startpath.hooks import ldscan, ldsocache  # noqa: PLC0415

    try:
        entries = ldscan.scan(rootfs, dirs, _builtin_dirs(triplet), release)
    except ldscan.Unsupported:
        return False
    try:
        generator = ldsocache.read_generator(old) if old else None
        data = ldsocache.build_cache(
            entries,
            generator or GENERATOR,
            extension=release.extension,
            compat=release.compat,
            endian=release.endian,
        )
        rootfs.write_file(LD_SO_CACHE, data, CACHE_MODE)
    except OSError as exc:
        raise HookError(
            f"{HOOK}: cannot write {exc.filename or LD_SO_CACHE} in the container: {exc.strerror}"
        ) from None
    return True


def _debian_triplet(rootfs: Rootfs, machine: str) -> str | None:
    """The multiarch triplet of a Debian-family image; None for any other."""
    triplet = _TRIPLETS.get(machine)
    return triplet if triplet is not None and _exists(rootfs, "/etc/debian_version") else None


def _libc_dirs(triplet: str | None) -> tuple[str, ...]:
    """Where the image's ldconfig's own libc is: the multiarch directories, else lib64's and lib's."""
    if triplet is not None:
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}")
    return ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


def _builtin_dirs(triplet: str | None) -> tuple[str, ...]:
    """The directories the image's own ldconfig adds after its configuration: the loader's own search
    path on Debian and Ubuntu (their patch), else lib64's (which glibc's ``add_system_dir`` turns into
    lib, lib64 and libx32)."""
    if triplet is not None:
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib")
    return ("/lib", "/lib64", "/libx32", "/usr/lib", "/usr/lib64", "/usr/libx32")


def _read_optional(rootfs: Rootfs, path: str, limit: int) -> bytes | None:
    try:
        return rootfs.read_regular(path, limit, follow=False)
    except OSError:
        return None


def normalize_ldconfig_path(path: str) -> str:
    """``<path>.real`` when it exists: Ubuntu's ``/sbin/ldconfig`` is a shell wrapper around it."""
    real = f"{path}.real"
    return real if os.path.exists(real) else path


def checked_folders(folders: Iterable[str]) -> list[str]:
    """The folders, duplicates dropped, each one safe to write as one line of ld.so.conf."""
    result: list[str] = []
    for folder in folders:
        # A line break would start a new ld.so.conf line (an "include" of the attacker's choice, were
        # the folder ever influenced), and "#" would silently cut the folder short.
        if (
            not folder.startswith("/")
            or ".." in folder.split("/")
            or "#" in folder
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in folder)
        ):
            raise HookError(
                f"{HOOK}: folder {folder!r} must be an absolute path without '..', control characters or '#'"
            )
        if folder not in result:
            result.append(folder)
    return result


def _refuse_host_root(rootfs: Rootfs) -> None:
    # The caller refuses "/" already; this guards against any spelling of it ("//", "/.", a link to it).
    here, host = os.fstat(rootfs.fd), os.stat("/")
    if rootfs.path == "/" or (here.st_dev, here.st_ino) == (host.st_dev, host.st_ino):
        raise HookError(f"{HOOK}: the container rootfs is the host's root directory; refusing to touch it")


def load_ldconfig(ldconfig_path: str) -> int:
    """The host's ldconfig, checked and copied into a sealed memfd (a descriptor the caller closes)."""
    if not ldconfig_path.startswith("/"):
        raise HookError(f"{HOOK}: --ldconfig-path {ldconfig_path!r} must be an absolute path on the host")
    try:
        return hostbinary.load_host_binary(normalize_ldconfig_path(ldconfig_path), "ldconfig")
    except HookError as exc:
        raise HookError(f"{HOOK}: {exc}") from None


# glibc images


def _write_confs(rootfs: Rootfs, folders: list[str], triplet: str | None) -> None:
    system = [folder for folder in _system_folders(triplet) if _is_dir(rootfs, folder)]
    path = LD_SO_CONF
    try:
        # An image's own ld.so.conf is kept as it is; only a missing one is created.
        rootfs.create_exclusive(path, LD_SO_CONF_DEFAULT, CONF_MODE)
        for path, lines in ((DRIVER_CONF, folders), (SYSTEM_CONF, system)):
            if lines:
                rootfs.write_file(path, os.fsencode("".join(f"{line}\n" for line in lines)), CONF_MODE)
    except OSError as exc:
        raise HookError(f"{HOOK}: cannot write {path} in the container: {exc.strerror}") from None


def _system_folders(triplet: str | None) -> list[str]:
    if triplet is not None:
        return [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib"]
    return ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]


# musl images


def _musl_arch(rootfs: Rootfs, machine: str) -> str | None:
    """musl's architecture name when the image is musl-based; None for glibc images.

    Debian can install musl next to glibc, so the loader alone decides only in an image without
    glibc's ld.so.conf and ld.so.cache.
    """
    arch = _MUSL_ARCHES.get(machine)
    if arch is None:
        return None
    if _exists(rootfs, "/etc/alpine-release"):
        return arch
    if not _exists(rootfs, f"/lib/ld-musl-{arch}.so.1"):
        return None
    return None if _exists(rootfs, LD_SO_CONF) or _exists(rootfs, "/etc/ld.so.cache") else arch


def _update_musl_path(rootfs: Rootfs, arch: str, folders: list[str]) -> None:
    path = f"/etc/ld-musl-{arch}.path"
    try:
        try:
            # Never through a link or into another mount: a link to /proc/iomem or a host file would
            # copy it, world-readable, into the container. Anything but a plain file here is ignored.
            data = rootfs.read_regular(path, _MAX_MUSL_PATH_FILE, follow=False, same_mount=True)
            entries = data.decode(errors="surrogateescape").replace(":", "\n").split()
        except OSError:
            entries = list(_MUSL_DEFAULT_PATH)
        missing = [folder for folder in folders if folder not in entries]
        if missing:
            rootfs.write_file(
                path, "".join(f"{e}\n" for e in entries + missing).encode(errors="surrogateescape")
            )
    except OSError as exc:
        raise HookError(f"{HOOK}: cannot update {path} in the container: {exc.strerror}") from None


def _exists(rootfs: Rootfs, path: str) -> bool:
    return _opens(rootfs, path, os.O_PATH)


def _is_dir(rootfs: Rootfs, path: str) -> bool:
    return _opens(rootfs, path, os.O_PATH | os.O_DIRECTORY)


def _opens(rootfs: Rootfs, path: str, flags: int) -> bool:
    try:
        os.close(rootfs.open(path, flags))
    except OSError:
        return False
    return True


def default_ldconfig() -> str:
    """The ldconfig a hook falls back on: the node runtime's own when the hook runs from one (the
    node may have none: Bottlerocket, Talos, a busybox root), else the host's ``/sbin/ldconfig``."""
    return bundled_ldconfig() or DEFAULT_LDCONFIG


def prepare(options: Options) -> Prepared:
    """The update-ldcache step: the folders are checked here. In the batched hook the host's ldconfig
    is too, copied into a sealed memfd before the other steps change the container; alone, the step
    loads it once it knows the image is not musl's (whose loader has no cache: ldconfig never runs)."""
    folders = checked_folders(options.all("folder"))
    path = options.get("ldconfig-path") or default_ldconfig()
    if not options.batched:
        return Prepared(lambda rootfs: update_ldcache(rootfs, folders, path))
    ldconfig = load_ldconfig(path)

    def run(rootfs: Rootfs) -> None:
        update_ldcache(rootfs, folders, ldconfig=os.dup(ldconfig))  # which closes its copy

    return Prepared(run, lambda: os.close(ldconfig))
