"""Start path: standard library only.

The ``update-ldcache`` hook: make the container's dynamic linker find the injected driver libraries.

nvidia-cdi-hook compatible: the requested folders go into an ld.so.conf.d drop-in, the container's own
system library folders into another, and the container's ``/etc/ld.so.cache`` and SONAME links are
rebuilt. cdictk writes them itself (:mod:`cdictk.hooks.ldscan`, :mod:`cdictk.hooks.ldsocache`): the
same bytes and links as glibc's ldconfig, without starting a process, and nothing of the image is run
or parsed by anything but this code. Only an image that asks for what the writer leaves to ldconfig
(glibc-hwcaps or legacy hwcap subdirectories, ``dir=type`` lines) gets the host's ldconfig, as before.

Safer than nvidia-cdi-hook in three ways. The files are written from the hook process through
:class:`~cdictk.rootfs.Rootfs`, which resolves every path inside the rootfs. ldconfig runs in
:mod:`cdictk.hooks.sandbox`, which also works when the rootfs is a plain directory and removes the
procfs mounts whose magic links lead back to the host. And the drop-ins have fixed names, so a second
run changes nothing but the cache.

ldconfig opens whatever the image's configuration names without looking at it first, so a FIFO there
would stall it: the files its ``include`` lines lead to are checked before it runs, and it runs under a
deadline that fits a container start, which also ends what the checks cannot foresee (includes that
multiply, wildcards in directory names, a FIFO behind a library's symlink).

Musl images have no ld.so.cache: there the folders are added to ``/etc/ld-musl-<arch>.path`` and
no cache is written.
"""

from __future__ import annotations

import os
import stat

from cdictk.errors import HookError
from cdictk.hooks import hostbinary, ldconf
from cdictk.hooks.steps import DEFAULT_LDCONFIG, Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from cdictk.rootfs import Rootfs

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
# (docs/development.md), and a bound on what an image that makes it walk forever adds to a start.
LDCONFIG_TIMEOUT = 2.0
# The include walk stops (leaving the rest to the deadline) after this many paths, lines and directory
# entries: a real image has a few dozen of each.
_CONF_BUDGET = 4096
_MAX_CONF_SIZE = 64 << 10
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}

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
        # The writer reads the configuration itself and hands back what it will not read (a FIFO,
        # a device): those are refused here, before ldconfig could block on them.
        if _write_cache(rootfs, triplet):
            return
        _check_confs(rootfs)
        from cdictk.hooks import sandbox  # noqa: PLC0415 - only for the images the writer hands back

        try:
            sandbox.run_in_rootfs(rootfs, exe, LDCONFIG_ARGV, timeout=timeout, what="ldconfig")
        except HookError as exc:
            raise HookError(f"{HOOK}: {exc}") from None
    finally:
        os.close(exe)


def _write_cache(rootfs: Rootfs, triplet: str | None) -> bool:
    """Write the cache and the SONAME links ldconfig would write, without running it; False when the
    image needs something only ldconfig does (:class:`ldscan.Unsupported`)."""
    from cdictk.hooks import ldscan, ldsocache  # noqa: PLC0415

    try:
        found = ldscan.scan(rootfs, _builtin_dirs(triplet), LD_SO_CONF)
    except ldscan.Unsupported:
        return False
    for target, link in found.links:
        # As ldconfig, which says "Can't link" and goes on: a SONAME link that cannot be made (its
        # directory a read-only volume, a mount the hook never writes across) costs that library its
        # link, not the container its start. The cache still names the link's path, as ldconfig's does.
        try:
            rootfs.symlink(target, link)
        except OSError:
            continue
    try:
        old = _read_optional(rootfs, LD_SO_CACHE, ldscan.MAX_CACHE_SIZE)
        generator = ldsocache.read_generator(old) if old else None
        data = ldsocache.build_cache(found.entries, generator or GENERATOR)
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


def _builtin_dirs(triplet: str | None) -> tuple[str, ...]:
    """The directories the image's own ldconfig adds after its configuration: Debian's multiarch
    ones, else lib64's (which glibc's ``add_system_dir`` turns into lib, lib64 and libx32)."""
    if triplet is not None:
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}")
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


def _check_confs(rootfs: Rootfs) -> None:
    """Refuse a configuration file ldconfig would block on (a FIFO) or should not open (a device node,
    which the sandbox cannot make unopenable before Linux 5.12).

    The includes are followed as ldconfig follows them, each file once, resolved inside the rootfs as
    ldconfig resolves them after pivot_root. Anything it cannot open it skips, and so does this.
    """
    budget = _CONF_BUDGET
    pending: list[tuple[str, str]] = [(LD_SO_CONF, "")]
    seen: set[tuple[int, int]] = set()
    while pending and budget > 0:
        path, included_by = pending.pop()
        lines = _read_conf(rootfs, path, included_by, seen).split(b"\n")
        budget -= 1 + len(lines)
        for pattern in ldconf.includes(path, lines):
            if budget <= 0:
                break
            matches, scanned = ldconf.glob(rootfs, pattern, budget)
            budget -= 1 + scanned
            pending += [(match, path) for match in matches]


def _read_conf(rootfs: Rootfs, path: str, included_by: str, seen: set[tuple[int, int]]) -> bytes:
    """The file's content; empty when ldconfig would read nothing from it or it was read already."""
    try:
        fd = rootfs.open(path)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if (st.st_dev, st.st_ino) in seen:
        return b""
    seen.add((st.st_dev, st.st_ino))
    # An included directory gives ldconfig nothing to read and costs nothing; an ld.so.conf that is
    # one would make it skip every drop-in, the hook's own included.
    if stat.S_ISDIR(st.st_mode) and included_by:
        return b""
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS[stat.S_IFMT(st.st_mode)]
        where = f" (included by {included_by})" if included_by else ""
        raise HookError(f"{HOOK}: {path} in the container is {kind}, not a regular file{where}")
    try:
        # Only from the image's own mount: an include into procfs must not make root read a host
        # kernel file (reading /proc/kmsg consumes the kernel log). ldconfig, without procfs, still
        # reads what is skipped here, and a file too large to walk, under the deadline.
        return rootfs.read_regular(path, _MAX_CONF_SIZE, same_mount=True)
    except OSError:
        return b""


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


def prepare(options: Options) -> Prepared:
    """The update-ldcache step: the folders are checked here. In the batched hook the host's ldconfig
    is too, copied into a sealed memfd before the other steps change the container; alone, the step
    loads it once it knows the image is not musl's (whose loader has no cache: ldconfig never runs)."""
    folders = checked_folders(options.all("folder"))
    path = options.get("ldconfig-path") or DEFAULT_LDCONFIG
    if not options.batched:
        return Prepared(lambda rootfs: update_ldcache(rootfs, folders, path))
    ldconfig = load_ldconfig(path)

    def run(rootfs: Rootfs) -> None:
        update_ldcache(rootfs, folders, ldconfig=os.dup(ldconfig))  # which closes its copy

    return Prepared(run, lambda: os.close(ldconfig))
