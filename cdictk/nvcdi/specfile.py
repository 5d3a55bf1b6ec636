"""Where a generated spec goes: the output policy of ``cdictk cdi generate``, once or ``--watch``.

The file is written atomically with mode 0644 (runtimes of any user must be able to read it), owned by
the writer, and not at all when its bytes, mode and owner are right already, so spec watchers see no
event for nothing. A file with the same bytes that someone else owns (or with another mode) is
replaced all the same: its hooks run as root, and its owner could change them at any time. Temporary
files a killed run left beside it are removed on the next run
(:func:`cdictk.startpath.helpers.fsutil.sweep_temps`). Anything but a regular file at the path (a symlink, a
FIFO, /dev/stdout) is refused before it is opened: reading a FIFO would hang, and the atomic rename would
replace a link rather than write through it. ``--check`` compares without writing. ``--watch`` regenerates
when the node's fingerprint or the file itself changes (:class:`WatchedSpec`, :mod:`cdictk.nvcdi.watch`).
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cdictk.nvcdi.nodespec import NodeSpec
from cdictk.nvcdi.watch import FatalWatchError, WatchTiming, watch
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, read_capped, sweep_temps, writable_directory
from cdictk.startpath.helpers.roots import Roots
from cdictk.startpath.specs.fingerprint import node_fingerprint

MAX_SPEC_BYTES = 64 << 20  # far above any generated spec; a bigger file is not ours

Stamp = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OnDisk:
    data: bytes | None  # None: no file
    not_ours: str | None  # why the file is not as we leave it ("owned by uid 1000"), None when it is
    stamp: Stamp | None  # what the file was when read, to notice a later change by someone else


def read(path: str) -> OnDisk:
    """The spec at ``path`` now."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return OnDisk(None, None, None)
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from exc
    if not stat.S_ISREG(info.st_mode):
        raise CdictkError(path, "", "not a regular file (use --output - for stdout)")

    return OnDisk(read_capped(path, MAX_SPEC_BYTES), _not_ours(info), stamp_of(info))


def _not_ours(info: os.stat_result) -> str | None:
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}"
    mode = stat.S_IMODE(info.st_mode)
    return None if mode == 0o644 else f"with mode {mode:04o}"


def write(path: str, data: bytes) -> Stamp:
    """Write ``data`` atomically with mode 0644; the stamp of the file as written."""

    writable_directory(os.path.dirname(os.path.abspath(path)))
    return stamp_of(atomic_write(path, data, mode=0o644, keep_mode=False, sweep=True))


def update(path: str, data: bytes) -> tuple[bool, Stamp | None, str | None]:
    """Write ``data`` unless the file is ours and holds it already: (written, stamp, replaced), where
    ``replaced`` says why a file that held ``data`` already was replaced ("owned by uid 1000")."""
    return settle(path, data, read(path))


def settle(path: str, data: bytes, current: OnDisk) -> tuple[bool, Stamp | None, str | None]:
    """:func:`update` with the file as read already."""
    if current.data != data:
        return True, write(path, data), None
    if current.not_ours is not None:
        return True, write(path, data), current.not_ours

    sweep_temps(path)  # a killed run's leftovers go even when there is nothing to write
    return False, current.stamp, None


def wrote(path: str, replaced: str | None) -> str:
    """What to say once ``path`` is written; ``replaced``: why the same bytes were written again."""
    if replaced is None:
        return f"wrote {path}"
    return f"wrote {path}: replaced the same spec {replaced}"


def check(path: str, data: bytes) -> str | None:
    """Why the spec on disk is not ``data`` (missing, or stale), or None when it is."""
    current = read(path).data
    if current == data:
        return None
    return "missing" if current is None else "stale: differs from a fresh generation"


def stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid)


def path_stamp(path: str) -> Stamp | None:
    try:
        return stamp_of(os.lstat(path))
    except OSError:
        return None


class WatchedSpec:
    """The spec file ``--watch`` keeps: the node's fingerprint with the output's, and one regeneration."""

    def __init__(
        self,
        produce: Callable[[], NodeSpec],
        *,
        roots: Roots,
        output: str,
        fmt: str,
        say: Callable[[str], None],
        warn: Callable[[str], None],
        inputs: tuple[str, ...] = (),
    ) -> None:
        self._produce = produce
        self._inputs = inputs  # files beside the node's usual ones that the spec is made from
        self._roots = roots
        self._output = output
        self._fmt = fmt
        self._say = say
        self._warn = warn
        self._shown: list[str] = []
        self._written: Stamp | None = None  # the output as we last wrote or read it

    def fingerprint(self) -> object:

        # The output is part of it: a spec deleted, replaced, chmod'ed or chown'ed by someone else is
        # put back.
        # Its own stamp, not a flag: two changes by others in a row must differ from each other too.
        stamp = path_stamp(self._output)
        return node_fingerprint(self._roots, self._inputs), "ours" if stamp == self._written else stamp

    def regenerate(self) -> None:

        made = self._produce()
        if made.warnings != self._shown:  # once, not every time the node is looked at
            self._shown[:] = made.warnings
            for message in made.warnings:
                self._warn(message)
        data = made.dump(self._fmt)
        try:
            current = read(self._output)
        except CdictkError as exc:  # a link, a directory, a FIFO: waiting will not change it
            raise FatalWatchError(exc.problem.file, exc.problem.field, exc.problem.reason) from exc
        written, stamp, replaced = settle(self._output, data, current)
        if written:
            self._say(f"{wrote(self._output, replaced)} ({made.summary})")
        # The stamp of the file as written or read, never a second look at the path: a spec removed in
        # between would be remembered as "ours, missing", and never be put back.
        self._written = stamp


def watch_spec(
    produce: Callable[[], NodeSpec],
    *,
    roots: Roots,
    output: str,
    fmt: str,
    interval: float,
    say: Callable[[str], None],
    warn: Callable[[str], None],
    inputs: tuple[str, ...] = (),
) -> None:
    """Keep ``output`` current until SIGTERM or SIGINT; see :mod:`cdictk.nvcdi.watch`.

    ``inputs``: host paths of files the spec is made from beside the node's usual ones (CSV files)."""

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    watched = WatchedSpec(produce, roots=roots, output=output, fmt=fmt, say=say, warn=warn, inputs=inputs)
    say(f"watching the node every {interval:g} s for {output}")
    watch(watched.fingerprint, watched.regenerate, stop.wait, WatchTiming(interval), warn)
    say(f"stopped watching for {output}")
