"""Reading and writing daemon configs the careful way.

- A symlinked config is refused unless asked to follow it (then its target is edited): replacing the
  link with a file would silently detach the config from where its owner keeps it.
- One run at a time: an exclusive lock on the config's directory, held from reading to writing.
- Before the first change to a file, a one-time copy ``<file>.cdictk.orig`` of what was there.
- Writes are atomic and keep the file's mode and owner; an unchanged file is not written (its mtime
  stays); ``dry_run`` prints a unified diff instead. Temporary files a killed run left beside a config
  are removed by the next run (:func:`cdictk.startpath.helpers.fsutil.sweep_temps`).
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, read_capped, sweep_temps, writable_directory

MAX_CONFIG_BYTES = 16 << 20
BACKUP_SUFFIX = ".cdictk.orig"


@dataclass(frozen=True, slots=True)
class Current:
    path: str  # the file to edit (a followed symlink's target)
    text: str | None  # None: the file does not exist


def read(path: str, *, follow_symlinks: bool) -> Current:
    if not os.path.isabs(path):
        raise CdictkError(path, "", "must be an absolute path")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Current(path, None)
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from exc
    if stat.S_ISLNK(info.st_mode):
        if not follow_symlinks:
            raise CdictkError(
                path, "", "is a symlink; refusing to replace it (--follow-symlinks edits its target)"
            )
        return read(os.path.realpath(path), follow_symlinks=False)
    if not stat.S_ISREG(info.st_mode):
        raise CdictkError(path, "", "not a regular file")
    # Capped, and refusing a FIFO swapped in after the lstat above instead of blocking on it.
    data = read_capped(path, MAX_CONFIG_BYTES)
    try:
        return Current(path, data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CdictkError(path, "", f"not UTF-8 text (byte {exc.start})") from exc


@contextlib.contextmanager
def locked(path: str, *, create: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s directory until the block ends; the directory is created
    when missing unless ``create`` is false (a dry run), which then runs without a lock: there is
    nothing there to race for."""
    directory = os.path.dirname(path)
    if not create and not os.path.isdir(directory):
        yield
        return
    writable_directory(directory)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise CdictkError(directory, "", exc.strerror or str(exc)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def diff(path: str, old: str | None, new: str | None) -> str:
    """A unified diff ``patch`` accepts, last lines without a newline marked as diff(1) marks them."""
    lines = difflib.unified_diff(
        _lines(old),
        _lines(new),
        fromfile=path if old is not None else "/dev/null",
        tofile=path if new is not None else "/dev/null",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _lines(text: str | None) -> list[str]:
    return (text or "").splitlines(keepends=True)


def commit(current: Current, new: str | None, *, dry_run: bool, backup: bool = True) -> bool:
    """Make ``current.path`` hold ``new`` (None: no file). True when something changed (or would).

    ``backup=False`` for files that are cdictk's own (a drop-in): there is nothing of the user's to keep.
    """
    if new == current.text or (current.text is None and not new):
        if not dry_run:
            sweep_temps(current.path)  # a killed run's leftovers go even when there is nothing to write
        return False  # an absent file and an empty one are the same config
    if dry_run:
        sys.stdout.write(diff(current.path, current.text, new))
        return True
    if backup:
        # A file that did not exist is backed up as an empty one, so that a later backup can never
        # hold cdictk's own output.
        _backup(current.path, current.text or "")
    if new is None:
        try:
            os.unlink(current.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CdictkError(current.path, "", f"cannot remove: {exc.strerror}") from exc
        return True
    writable_directory(os.path.dirname(current.path))  # conf.d/ may not exist yet
    atomic_write(current.path, new.encode("utf-8"), sweep=True)
    return True


def read_backup(path: str) -> bytes | None:
    """The one-time copy of ``path`` as it was before cdictk first changed it (for --remove to put back
    what configure replaced); None when there is none or it cannot be read."""
    try:
        with open(path + BACKUP_SUFFIX, "rb") as handle:
            return handle.read(MAX_CONFIG_BYTES)
    except OSError:
        return None


def _backup(path: str, text: str) -> None:
    backup = path + BACKUP_SUFFIX
    if os.path.lexists(backup):
        return  # one time: the copy of the file as it was before cdictk first touched it
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o644
    atomic_write(backup, text.encode("utf-8"), mode=mode, sweep=True)
