"""Where the prestart hook's messages go: stderr, and a log file when the node names one.

runc shows a prestart hook's stderr only when the hook fails, and Docker runs the hook with no
arguments but ``prestart``: a warning (a request the policy ignored) or a debug line would never be
seen. dockerd gives the hook its own environment, so ``CDICTK_HOOK_LOG=FILE`` there (a systemd
drop-in's ``Environment=``) appends every line, debug lines included, to FILE, and ``CDICTK_DEBUG=1``
turns the debug lines on for stderr too, as ``--debug`` does.
"""

from __future__ import annotations

import os
import stat
import sys
import time

from cdictk.startpath.helpers.errors import CdictkError

LOG_FILE = "CDICTK_HOOK_LOG"
DEBUG = "CDICTK_DEBUG"


class Log:
    """One line per message, prefixed with ``prog``; the file, if any, gets the time and every line."""

    __slots__ = ("debug_on", "fd", "prog", "tag")

    def __init__(self, prog: str, *, debug: bool = False) -> None:
        self.prog = prog
        self.debug_on = debug or os.environ.get(DEBUG, "").lower() in ("1", "true", "yes")
        self.tag = ""  # the container, once known
        self.fd = -1
        path = os.environ.get(LOG_FILE, "")
        if path.startswith("/"):
            try:  # never through a symlink, never a FIFO that would block the start
                from cdictk.startpath.helpers.fsutil import check_directory  # noqa: PLC0415 - only with a log file

                check_directory(
                    os.path.dirname(path)
                )  # as every writer: never a directory others could change
                fd = os.open(
                    path,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    0o600,
                )
                problem = _planted(os.fstat(fd))
                if problem is None:
                    self.fd = fd
                else:
                    os.close(fd)
                    print(f"{prog}: warning: {LOG_FILE}={path}: {problem}; not written", file=sys.stderr)
            except OSError as exc:
                print(f"{prog}: warning: {LOG_FILE}={path}: {exc.strerror}", file=sys.stderr)
            except CdictkError as exc:
                print(f"{prog}: warning: {LOG_FILE}={path}: {exc}", file=sys.stderr)

    def debug(self, line: str) -> None:
        self._emit(line, to_stderr=self.debug_on)

    def warn(self, line: str) -> None:
        self._emit(f"warning: {line}", to_stderr=True)

    def error(self, line: str) -> None:
        self._emit(line, to_stderr=True)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _emit(self, line: str, *, to_stderr: bool) -> None:
        if to_stderr:
            print(f"{self.prog}: {line}", file=sys.stderr)
        if self.fd >= 0:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            tag = f" [{self.tag}]" if self.tag else ""
            try:  # noqa: SIM105 - contextlib costs imports on every container start
                os.write(self.fd, f"{stamp} {self.prog}{tag}: {line}\n".encode(errors="replace"))
            except OSError:
                pass  # a full disk must not stop containers


def _planted(st: os.stat_result) -> str | None:
    """Why the opened log file is not one root may append to: in a sticky directory (``/tmp``, which
    the directory check lets through) anyone may have made the name first, as a FIFO, a file of
    theirs (which would then hold every container's lines), or a hard link to a file of root's
    (which root would append to). The check is on the descriptor: what was opened is what is judged."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}, not root"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} hard links"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
