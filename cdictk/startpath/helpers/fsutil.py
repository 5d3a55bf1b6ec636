"""The one way cdictk writes a file: temp file in the same directory, fsync, rename, fsync the directory.

A reader (a runtime loading a spec, runc loading config.json) sees the old file or the new one, never
a half-written one, even across a crash. Standard library only, and not even :mod:`contextlib` (a few
milliseconds of imports): the runtime shim writes ``config.json`` on every container create.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.errors import CdictkError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

AT_FDCWD = -100
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def atomic_write(
    path: str,
    data: bytes,
    *,
    mode: int | None = None,
    keep_mode: bool = True,
    sweep: bool = False,
    lock: bool = False,
    no_replace: bool = False,
    engine_directory: bool = False,
) -> os.stat_result:
    """Replace ``path`` with ``data`` atomically; return the new file's status as written.

    Its directory must be root's alone first (:func:`check_directory`), unless ``engine_directory``:
    an OCI bundle, the engine's own, where whoever could change the directory could have changed the
    file we read (the shim's ``config.json``).

    The new file keeps the mode and owner of the file it replaces (with ``keep_mode=False`` it gets
    ``mode`` and belongs to the writer); a new file gets ``mode`` (default 0o644). A file of another
    user in a directory others may write (sticky, ``/tmp``) is not kept from: anyone could have
    planted it, so the new file gets ``mode`` and belongs to the writer. A symlink at
    ``path`` is refused rather than replaced by a regular file or followed. The status comes from the
    descriptor, not from ``path``, which someone may have replaced or removed by the time it returns.

    ``sweep``: first remove the temporary files that killed writers of ``path`` left
    (:func:`sweep_temps`), and hold a lock on our own from its creation to its rename, so that another
    writer's sweep leaves it alone: every writer of a path that is swept must pass it. Off by default:
    the shim writes ``config.json`` on every container create, into a bundle nobody sweeps. ``lock``:
    the lock without the sweep, for a writer whose directory someone else sweeps
    (:func:`sweep_temps_of`) and that cannot afford to list it on every write.

    ``no_replace``: create ``path`` or fail with FileExistsError, never replace it, even when another
    writer creates it meanwhile (``renameat2`` with ``RENAME_NOREPLACE``; where a filesystem lacks it,
    a hard link, which fails the same way).
    """
    directory = os.path.dirname(path) or "."
    if not engine_directory:
        check_directory(directory)
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from None
    if old is not None and no_replace:
        raise FileExistsError(17, "File exists", path)  # EEXIST
    if old is not None and stat.S_ISLNK(old.st_mode):
        raise CdictkError(path, "", "is a symlink; refusing to replace it")
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise CdictkError(path, "", "not a regular file")
    if old is not None and keep_mode and not engine_directory and _planted(directory, old):
        keep_mode = False
    final_mode = 0o644 if mode is None else mode
    if old is not None and keep_mode:
        final_mode = stat.S_IMODE(old.st_mode)

    if sweep:
        sweep_temps(path)
    fd, tmp = _create_temp(path, lock=sweep or lock)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            # The old owner only with the old mode: a file written with a mode of its own (a CDI spec,
            # whose hooks run as root) must not go to whoever planted the file it replaces.
            if old is not None and keep_mode and os.geteuid() == 0:
                os.fchown(fd, old.st_uid, old.st_gid)
            os.fchmod(fd, final_mode)
            os.fsync(fd)
            status = os.fstat(fd)
            if no_replace:
                _rename_no_replace(tmp, path)
            else:
                os.rename(tmp, path)  # before the close: a sweep must never find our temp file unlocked
        finally:
            os.close(fd)
    except FileExistsError:
        _unlink(tmp)
        raise
    except OSError as exc:
        _unlink(tmp)
        raise CdictkError(path, "", f"cannot write: {exc.strerror}") from None
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_directory(directory)
    return status


def _planted(directory: str, old: os.stat_result) -> bool:
    """Whether ``old`` belongs to someone else in a directory others may write (a sticky one, the
    only kind :func:`check_directory` lets through): anyone could have made it there, so its owner
    and mode are not the node's choice, and keeping them would hand root's file to whoever planted
    it (a 0666 file of theirs, written by root, stays theirs to change)."""
    if old.st_uid in (0, os.geteuid()):
        return False
    try:
        return bool(os.stat(directory).st_mode & 0o022)
    except OSError:
        return True  # it was checked a moment ago: if it cannot be looked at now, trust nothing in it


def _rename_no_replace(tmp: str, path: str) -> None:
    import errno  # noqa: PLC0415 - ctypes and errno: only the writers that must not replace pay for them

    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415

    try:
        syscalls.renameat2(AT_FDCWD, tmp, AT_FDCWD, path, syscalls.RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):  # EINVAL: the filesystem has no NOREPLACE
            raise
        os.link(tmp, path)  # as atomic, and fails the same way when path exists
        os.unlink(tmp)


def _create_temp(path: str, *, lock: bool) -> tuple[int, str]:
    """A new temporary file next to ``path`` (descriptor, path), locked when asked."""
    directory, name = os.path.split(path)
    for _ in range(3):
        # A random name: a temp file left by a crash never blocks the next write.
        tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise CdictkError(path, "", f"cannot create a temporary file: {exc.strerror}") from None
        if not lock:
            return fd, tmp
        import fcntl  # noqa: PLC0415 - only writers that sweep pay for it

        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A sweep may have taken it in the instant between the open and the lock: then it is
            # unlinked by the time we hold the lock, and a fresh name is needed.
            if os.fstat(fd).st_nlink:
                return fd, tmp
        except OSError as exc:
            os.close(fd)
            _unlink(tmp)
            raise CdictkError(path, "", f"cannot lock a temporary file: {exc.strerror}") from None
        os.close(fd)
    raise CdictkError(path, "", "cannot keep a temporary file: removed as soon as made")


def sweep_temps(path: str) -> None:
    """Remove the temporary files that writers of ``path`` killed mid-write left beside it.

    A sweeping writer holds an exclusive ``flock`` on its temporary file from its creation until its
    rename (see :func:`atomic_write`), and the kernel drops it when the writer dies: a temporary file
    we can lock without waiting has no writer left. Only the names atomic_write makes are looked at
    (``.NAME.`` + 12 hex digits + ``.tmp``), and only regular files. Best effort: whatever cannot be
    listed, locked or removed stays.
    """
    directory, name = os.path.split(path)
    _sweep(directory, lambda target: target == name)


def sweep_temps_of(directory: str, prefix: str) -> None:
    """:func:`sweep_temps` for every file of ``directory`` whose name starts with ``prefix``."""
    _sweep(directory, lambda target: target.startswith(prefix))


def _sweep(directory: str, wanted: Callable[[str], bool]) -> None:
    import fcntl  # noqa: PLC0415 - not on the shim's path

    try:
        dfd = os.open(directory or ".", _DIR_FLAGS)
    except OSError:
        return
    try:
        for entry in os.listdir(dfd):
            if not (entry.startswith(".") and entry.endswith(".tmp")):
                continue
            target, _, token = entry[1 : -len(".tmp")].rpartition(".")
            if not (_is_temp_token(token) and wanted(target)):
                continue
            try:
                seen = os.stat(entry, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(seen.st_mode):
                    continue
                fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino == seen.st_ino:  # the file we looked at, not one renamed in since
                    os.unlink(entry, dir_fd=dfd)
            except OSError:
                pass  # locked: its writer is alive
            finally:
                os.close(fd)
    finally:
        os.close(dfd)


def _is_temp_token(text: str) -> bool:
    return len(text) == 12 and not set(text) - set("0123456789abcdef")


def _fsync_directory(directory: str) -> None:
    # Makes the rename durable; some filesystems refuse fsync on a directory, which is not fatal.
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _unlink(path: str) -> None:
    try:  # noqa: SIM105 - see the module's docstring
        os.unlink(path)
    except OSError:
        pass


def check_directory(directory: str) -> None:
    """Refuse, with one line, a directory to write into that someone other than root (or the user
    running us) could change: on the way the kernel walks it, every entry must be ours and writable
    by nobody else (:func:`cdictk.startpath.trust.path_problem`: a link is judged, then where it leads, name
    by name; ``..`` goes up from where the links led, as the write will); the directory itself may be a
    sticky one (``/tmp``), where nobody else may rename or remove what we put there. A link on the
    way is followed only once it passed the same check, so a user's ``/tmp/pub/specs -> /etc`` is
    refused, never written through. What passes can only be changed by root afterwards: writing by
    path is then writing where it was checked. A directory that is missing, or is not one, is
    refused too."""
    from cdictk.startpath.trust import path_problem  # noqa: PLC0415 - not on the shim's path

    # A missing directory is said so here, not left to the write: in /tmp a user could make it
    # between this check and the write, which would then go into their directory unchecked.
    try:
        st = os.stat(directory)
    except OSError as exc:
        raise CdictkError(directory, "", f"not written: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CdictkError(directory, "", "not written: not a directory")
    problem = path_problem(directory, leaf_sticky_ok=True)
    if problem is not None:
        raise CdictkError(directory, "", f"not written: {problem}: someone other than root could change it")


def writable_directory(directory: str, mode: int = 0o755) -> None:
    """The directory a writer writes into, made when missing (:func:`make_dirs`) and checked
    (:func:`check_directory`): the deepest part that exists is checked before anything is made under
    it, and the whole of it after, so nothing is made in a directory of someone else's and a
    directory someone else made meanwhile (in ``/tmp``) is refused."""
    existing = os.path.abspath(directory)
    while not os.path.lexists(existing) and existing != "/":
        existing = os.path.dirname(existing)
    check_directory(existing)
    if existing != os.path.abspath(directory):
        try:
            make_dirs(directory, mode)
        except OSError as exc:
            raise CdictkError(directory, "", f"cannot create: {exc.strerror}") from exc
        check_directory(directory)


def make_dirs(path: str, mode: int = 0o755) -> None:
    """Create ``path`` and each missing directory above it with exactly ``mode``, whatever the umask.

    ``os.makedirs`` gives the parents it creates 0777 less the umask: 0777 under root's umask 000. A
    directory that exists is used as it is (a link to one included, as ``os.makedirs`` does); one we
    create is opened with ``O_NOFOLLOW`` before its mode is set, so a link swapped in meanwhile is
    never chmod'ed through. Something in the way that is not a directory is a FileExistsError.
    """
    path = os.path.abspath(path)
    missing: list[str] = []
    head = path
    while True:
        try:
            fd = os.open(head, _DIR_FLAGS)
            break
        except FileNotFoundError:
            if head == "/":
                raise
            head, name = os.path.split(head)
            missing.append(name)
        except NotADirectoryError:
            raise _in_the_way(head) from None
    try:
        for name in reversed(missing):
            try:
                os.mkdir(name, mode, dir_fd=fd)  # born with at most mode: the umask only takes away
                made = True
            except FileExistsError:
                made = False  # made by someone else meanwhile
            try:
                child = os.open(name, _DIR_FLAGS | (os.O_NOFOLLOW if made else 0), dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):  # a file, or a dangling link
                raise _in_the_way(os.path.join(head, name)) from None
            os.close(fd)
            fd = child
            head = os.path.join(head, name)
            if made:
                os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _in_the_way(path: str) -> FileExistsError:
    import errno  # noqa: PLC0415 - an error path: not an import on every container start

    return FileExistsError(errno.EEXIST, "exists and is not a directory", path)


def read_capped(path: str, limit: int) -> bytes:
    """Read a regular file of at most ``limit`` bytes.

    Symlinks are followed (spec dirs may hold links), but FIFOs and devices are refused before a
    read could block, and a file that grows past the cap while we read is still refused.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CdictkError(path, "", "not a regular file")
        if st.st_size > limit:
            raise CdictkError(path, "", f"file is {st.st_size} bytes, over the {limit}-byte limit")
        data = read_fd(fd, limit)
        if data is None:
            raise CdictkError(path, "", f"file is over the {limit}-byte limit")
        return data
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> bytes | None:
    """What is left to read from ``fd``, or None when that is more than ``limit`` bytes.

    Reads to the end whatever ``st_size`` says: procfs and sysfs files report 0 and hand out a page or
    so per read, and a file may grow while it is read.
    """
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    return None
