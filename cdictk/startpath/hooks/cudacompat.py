"""enable-cuda-compat: let an image's CUDA forward-compatibility libcuda win over an older host driver.

CUDA images may ship ``/usr/local/cuda/compat/libcuda.so.<version>``, a user-mode driver newer than
the host's. When it should be used, this hook writes :data:`COMPAT_CONF`, an ld.so.conf.d entry naming
the compat directory; the update-ldcache step that runs afterwards puts it into the container's ld
cache ahead of the host's libcuda (``00-`` sorts first). ldconfig is not run here.

The decision is nvidia-cdi-hook's:

* nothing happens unless a host driver version or a host CUDA version is given;
* the compat directory must hold exactly one *regular file* named ``libcuda.so.<n>.<n>[.<n>...]``
  (symlinks such as ``libcuda.so.1``, FIFOs, devices and directories do not count; none, or several,
  means no compat and no error);
* with its ``.note.cuda.fwd_compatibility`` note (owner "NVIDIA Corporation", JSON
  ``{"Format":1,"CUDA Version":"12.8","Driver":[535,550,570],...}``) and a host driver version:
  compat iff the host driver's major is listed in ``Driver`` and the compat library's version (from
  its file name) is greater than the host driver's;
* with the note and only a host CUDA version: compat iff the note's ``CUDA Version`` is greater;
* without a usable note: compat iff the compat library's major is greater than the host driver's
  (never, when only a host CUDA version is known: there is nothing to compare it with).

A note that cannot be used (not ELF, damaged headers, bad JSON, a ``Format`` other than 1, missing
or mistyped fields) counts as *no note*, silently: the hook's job is to let the container start, and
the file-name rule is what older compat libraries without the note rely on anyway. The image controls
that file, so a damaged one can only cost the image its own compat libcuda.

When compat does not apply, a :data:`COMPAT_CONF` left by an earlier start of the same container (a
restart after a host driver upgrade) is removed, so a compat libcuda older than the new driver is not
kept ahead of it. Host versions that are not dotted numbers are a :class:`HookError`.

Everything in the rootfs is reached through :class:`~cdictk.startpath.helpers.rootfs.Rootfs` or a descriptor
of a directory opened through it; the library is opened O_PATH without following a symlink, checked to
be a regular file, and only then re-opened for reading, so a FIFO or device node is never opened.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.rootfs import reopen_regular
from cdictk.startpath.hooks.elfnote import read_notes
from cdictk.startpath.hooks.steps import COMPAT_ROOT, Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.startpath.helpers.rootfs import Rootfs

    Version = tuple[int, ...]
    Note = tuple[tuple[int, ...], Version]

COMPAT_CONF = "/etc/ld.so.conf.d/00-cdictk-cuda-compat.conf"
NOTE_SECTION = ".note.cuda.fwd_compatibility"
NOTE_OWNER = "NVIDIA Corporation"
_LIBCUDA = "libcuda.so."
_MAX_VERSION_TEXT = 64
_MAX_VERSION_PARTS = 8
_MAX_PART_DIGITS = 9
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# Directories that cannot be the compat directory: "no compat", not a failure.
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def enable_cuda_compat(
    rootfs: Rootfs,
    host_driver_version: str | None,
    host_cuda_version: str | None = None,
    compat_root: str = "/usr/local/cuda/compat",
) -> bool:
    """Write :data:`COMPAT_CONF` when the image's compat libcuda should be used; True if it should."""
    if not host_driver_version and not host_cuda_version:
        return False
    host_driver, host_cuda, compat_dir = check_arguments(host_driver_version, host_cuda_version, compat_root)

    found = _find_compat_library(rootfs, compat_dir)
    used = False
    if found is not None:
        compat_version, fd = found
        try:
            note = _read_note(fd)
        finally:
            os.close(fd)
        used = compat_applies(compat_version, note, host_driver, host_cuda)

    if used:
        try:
            rootfs.write_file(COMPAT_CONF, os.fsencode(f"{compat_dir}\n"), 0o644)
        except OSError as exc:
            raise HookError(f"cannot write {COMPAT_CONF} in the container: {exc.strerror}") from None
    else:
        _remove_stale_conf(rootfs)
    return used


def check_arguments(
    host_driver_version: str | None, host_cuda_version: str | None, compat_root: str
) -> tuple[Version | None, Version | None, str]:
    """The parsed host versions and the normalised compat directory; bad ones are a HookError."""
    return (
        _host_version("--host-driver-version", host_driver_version),
        _host_version("--host-cuda-version", host_cuda_version),
        _check_compat_root(compat_root),
    )


def compat_applies(
    compat_version: Version,
    note: Note | None,
    host_driver: Version | None,
    host_cuda: Version | None,
) -> bool:
    """The decision table. ``note`` is ``(driver majors, CUDA version)`` from a usable note, else None."""
    if note is not None:
        drivers, note_cuda = note
        if host_driver is not None:
            return host_driver[0] in drivers and compat_version > host_driver
        if host_cuda is not None:
            return note_cuda > host_cuda
        return False
    if host_driver is not None:
        return compat_version[0] > host_driver[0]
    return False


def parse_version(text: str, *, min_parts: int = 1) -> Version | None:
    """``"570.124.06"`` -> ``(570, 124, 6)``; None unless ASCII digits in 1 to 8 dot-separated parts."""
    if len(text) > _MAX_VERSION_TEXT:
        return None
    parts = text.split(".")
    if not min_parts <= len(parts) <= _MAX_VERSION_PARTS:
        return None
    for part in parts:
        # isdigit() alone also accepts digits such as "²" that int() rejects.
        if not (0 < len(part) <= _MAX_PART_DIGITS and part.isascii() and part.isdigit()):
            return None
    return tuple(int(part) for part in parts)


def _host_version(option: str, text: str | None) -> Version | None:
    if not text:
        return None
    version = parse_version(text)
    if version is None:
        raise HookError(f"{option} {text!r}: expected a version such as 570.124.06")
    return version


def _check_compat_root(path: str) -> str:
    # The path becomes a line of ld.so.conf: no line breaks, no "#" comments, no whitespace splits.
    if not path.startswith("/") or any(char <= " " or char in "#\x7f" for char in path):
        raise HookError(f"--cuda-compat-container-root {path!r}: expected an absolute path without spaces")
    # normpath keeps a leading "//" (POSIX allows it a meaning); ld.so.conf.d deserves the plain form.
    return "/" + posixpath.normpath(path).lstrip("/")


def _find_compat_library(rootfs: Rootfs, compat_dir: str) -> tuple[Version, int] | None:
    """The version and a readable descriptor of the one compat libcuda, or None."""
    try:
        dir_fd = rootfs.open(compat_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise HookError(f"cannot open {compat_dir} in the container: {exc.strerror}") from None
    found: tuple[Version, int] | None = None
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                version = _library_version(entry.name)
                if version is None:
                    continue
                fd = _open_regular(dir_fd, entry.name)
                if fd is None:
                    continue
                if found is not None:
                    os.close(fd)
                    os.close(found[1])
                    return None  # several: which one the image meant is anybody's guess
                found = (version, fd)
    except OSError as exc:
        if found is not None:
            os.close(found[1])
        raise HookError(f"cannot list {compat_dir} in the container: {exc.strerror}") from None
    finally:
        os.close(dir_fd)
    return found


def _library_version(name: str) -> Version | None:
    if not name.startswith(_LIBCUDA):
        return None
    return parse_version(name[len(_LIBCUDA) :], min_parts=2)


def _open_regular(dir_fd: int, name: str) -> int | None:
    """A read-only descriptor for ``name`` in ``dir_fd`` if it is a regular file (not a symlink to one)."""
    try:
        path_fd = os.open(name, _PATH_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # gone since the listing
    try:
        if not stat.S_ISREG(os.fstat(path_fd).st_mode):
            return None
        return reopen_regular(path_fd, name)
    except OSError as exc:
        # The host's /proc, not the image, is at fault: better a clear failure than compat silently off.
        raise HookError(f"cannot open {name} in the container: {exc.strerror}") from None
    finally:
        os.close(path_fd)


def _read_note(fd: int) -> Note | None:
    """The note's JSON when it is present and usable; None otherwise (see the module docstring)."""
    try:
        notes = read_notes(fd, NOTE_SECTION)
    except (ValueError, OSError):
        return None
    for owner, _type, desc in notes:
        if owner == NOTE_OWNER:
            return _usable_note(desc)
    return None


def _usable_note(desc: bytes) -> Note | None:
    from cdictk.startpath.helpers.strictjson import loads_for_hook as loads  # noqa: PLC0415 - only images with a note pay for it

    try:
        value = loads(desc.rstrip(b"\0"), NOTE_SECTION)
    except HookError:
        return None
    if not isinstance(value, dict):
        return None
    layout = value.get("Format")
    if type(layout) is not int or layout != 1:
        return None  # a later layout may mean something else by the same keys
    drivers = value.get("Driver")
    cuda = value.get("CUDA Version")
    if not isinstance(drivers, list) or not isinstance(cuda, str):
        return None
    # bool is an int subclass: true must not stand for driver 1.
    if not all(type(major) is int for major in drivers):
        return None
    cuda_version = parse_version(cuda)
    if cuda_version is None:
        return None
    return tuple(drivers), cuda_version


def _remove_stale_conf(rootfs: Rootfs) -> None:
    parent, name = posixpath.split(COMPAT_CONF)
    try:
        dir_fd = rootfs.open(parent, os.O_PATH | os.O_DIRECTORY, same_mount=True)
    except OSError:
        return  # no such directory (or not ours to change): nothing to remove
    try:
        # Look before unlinking: unlink on a read-only rootfs fails even when the name is absent.
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise HookError(f"cannot remove the stale {COMPAT_CONF} in the container: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def prepare(options: Options) -> Prepared:
    """The enable-cuda-compat step: the versions and the compat root are checked before it runs."""
    driver = options.get("host-driver-version") or None
    cuda = options.get("host-cuda-version") or None
    compat_root = options.get("cuda-compat-container-root") or COMPAT_ROOT
    if driver or cuda:  # without a host version the step does nothing, whatever the root says
        check_arguments(driver, cuda, compat_root)

    def run(rootfs: Rootfs) -> None:
        used = enable_cuda_compat(rootfs, driver, cuda, compat_root)
        options.log(f"CUDA forward compatibility {'enabled' if used else 'not used'}")

    return Prepared(run)
