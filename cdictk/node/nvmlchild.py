"""NVML in a child process: the one way cdictk asks the driver's ``libnvidia-ml``.

Every NVML caller (discovery's :class:`cdictk.node.nvml.NvmlQuery`, the legacy prestart hook's driver
facts when its cache misses, the device plugin's health watcher) runs its NVML work as a *job* in a
:class:`NvmlChild`:

- the child is forked (a new interpreter would start from nothing) and imports pynvml, the one NVML
  binding, while the parent goes on;
- the parent then asks it: the library file, chosen by :func:`cdictk.node.nvmllib.nvml_library`, and
  the job's argument. The child loads that file only once it passes :func:`cdictk.node.libchoice.load`'s
  check again, points pynvml at it (:func:`point_at`, the one place that does) and runs the job;
- the job sends messages, plain data (dicts) each framed on a pipe as a 4-byte length and marshal
  (bytes from our own forked child; what runs there, the driver's NVML, runs as us anyway). A
  question has one answer (:meth:`NvmlChild.answer`, by the deadline); a watcher streams them
  (:meth:`NvmlChild.receive`, without one). ``{"error": why}`` is a failure the child could say;
  ``"absent": true`` with it says there was no library to load;
- a deadline passed, a crash (no answer, the exit status said) or bytes that are no frame end in
  one :class:`~cdictk.node.nvmllib.NvmlError`, the child killed and reaped.

Why a child: a driver stuck in the kernel (a GPU after some Xid errors) never returns from
``nvmlInit``, and whatever waits on it would never end; NVML leaves threads and state behind (the
prestart hook joins a mount namespace afterwards, which a process of several threads cannot); and a
process that holds NVML initialised would see stale MIG state. The child's stdout and stderr go to
``/dev/null``: what NVML prints must not add lines to a hook's one-line error.
"""

from __future__ import annotations

import gc
import marshal
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from cdictk.node.libchoice import LibraryError, load
from cdictk.node.nvmllib import NvmlError

NVML_DEADLINE = 10.0  # seconds for a question: a healthy driver answers in a fraction of one
MAX_MESSAGE = 16 << 20  # bytes of one frame: far above any answer, so a larger length is bad data
_HEADER = 4

Send = Callable[[dict[str, Any]], None]
# (pynvml pointed at the library and not yet initialised, the argument, send): the NVML work.
Job = Callable[[Any, Any, Send], None]


def point_at(pynvml: Any, library: str) -> None:
    """Make pynvml use the NVML at ``library`` (a path judged by libchoice), loaded here only when it
    still passes that check: pynvml itself would load ``libnvidia-ml.so.1`` by name from the host's
    loader path, wrong under a driver root (a driver container, GKE's /usr/local/nvidia, a fake node)."""
    pynvml.nvmlLib = load(library)
    # pynvml keeps the functions it looked up in the library it had: forget them.
    pynvml._nvmlGetFunctionPointer_cache.clear()


class NvmlChild:
    """A job in a forked child (see the module). Forked at once: a caller that will want NVML starts
    one first thing, then :meth:`ask` s it once it knows the library. Leaving the ``with`` block (or
    :meth:`close`) kills the child unless it ended."""

    __slots__ = ("_buffer", "_end", "_pid", "_questions", "_reader", "_status", "deadline", "library")

    def __init__(self, job: Job, *, deadline: float | None = None) -> None:
        self.library = ""
        self.deadline = NVML_DEADLINE if deadline is None else deadline
        self._end = 0.0
        self._buffer = b""
        self._status = "status unknown"
        questions, asked = os.pipe()
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its work, then leave without running the parent's exit handlers
            # No collection here: a parent object freed by this child's collector runs its finalizer
            # in a process without the parent's threads (grpcio's asyncio stack joins its poller
            # thread, which never ends here).
            gc.disable()
            status = 1
            try:
                os.close(asked)
                os.close(reader)
                status = _child(job, questions, writer)
            finally:
                os._exit(status)
        os.close(questions)
        os.close(writer)
        self._pid: int | None = pid
        self._questions: int | None = asked
        self._reader: int | None = reader

    def __enter__(self) -> NvmlChild:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def ask(self, library: str, argument: Any = None) -> None:
        """Run the job on the NVML at ``library`` with ``argument`` (plain data); the deadline starts now."""
        if self._questions is None:
            raise NvmlError("the child was asked already", library=library)
        self.library = library
        self._end = time.monotonic() + self.deadline
        data = _frame((library, argument))
        try:  # a path and a few values: far below a pipe's buffer, so this never waits
            while data:
                data = data[os.write(self._questions, data) :]
        except OSError:  # the child is gone: its status is reported when it is read
            pass
        os.close(self._questions)
        self._questions = None

    def answer(self) -> dict[str, Any]:
        """The job's one message, by the deadline; NvmlError for an error message, none, or a late one."""
        message = self.receive(self._end)
        self.close()
        if message is None:
            raise NvmlError(f"the child ended without an answer ({self._status})", library=self.library)
        if "error" in message:
            raise NvmlError(str(message["error"]), library=self.library, absent=message.get("absent") is True)
        return message

    def receive(self, until: float | None = None) -> dict[str, Any] | None:
        """The child's next message; None once it ended (and was reaped). ``until``: a time.monotonic()
        past which it is killed and NvmlError raised (None: wait as long as it takes)."""
        if self._questions is not None:
            raise NvmlError("the child was never asked", library=self.library)
        if self._reader is None:
            raise NvmlError("the child has ended", library=self.library)
        while True:
            message = self._next_frame()
            if message is not None:
                return message
            left = None if until is None else until - time.monotonic()
            if left is not None and (left <= 0 or not select.select([self._reader], [], [], left)[0]):
                self.close()
                raise NvmlError(
                    f"no answer within {self.deadline:g} s: the driver may be hung (nvidia-smi would hang "
                    "too); check dmesg for Xid errors",
                    library=self.library,
                )
            chunk = os.read(self._reader, 1 << 16)
            if not chunk:
                if self._buffer:
                    self._bad("a message cut short")
                self._status = _describe_status(self._reap())
                return None
            self._buffer += chunk

    @property
    def status(self) -> str:
        """How the child ended, once :meth:`receive` saw it end: ``exit status 0``, ``killed by signal 9``."""
        return self._status

    def kill(self) -> None:
        """Kill the child, from any thread: the one in :meth:`receive` sees it end and reaps it."""
        pid = self._pid
        if pid is not None:
            try:  # noqa: SIM105 - as plain as the rest
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Kill the child unless it has ended, and reap it."""
        if self._questions is not None:
            os.close(self._questions)
            self._questions = None
        if self._reader is not None:
            os.close(self._reader)
            self._reader = None
        if self._pid is not None:
            self._reap(kill=True)

    def _next_frame(self) -> dict[str, Any] | None:
        if len(self._buffer) < _HEADER:
            return None
        size = int.from_bytes(self._buffer[:_HEADER], "big")
        if size > MAX_MESSAGE:
            self._bad(f"a message of {size} bytes")
        if len(self._buffer) < _HEADER + size:
            return None
        data, self._buffer = self._buffer[_HEADER : _HEADER + size], self._buffer[_HEADER + size :]
        try:
            message = marshal.loads(data)  # noqa: S302 - our own forked child's bytes (see the module)
        except (ValueError, EOFError, TypeError):
            message = None
        if not isinstance(message, dict):
            self._bad("bytes that are no message")
        return message

    def _bad(self, what: str) -> NoReturn:
        self.close()
        raise NvmlError(f"the child sent {what}", library=self.library)

    def _reap(self, *, kill: bool = False) -> int | None:
        """The child's wait status once it is reaped; killed first with ``kill``, or when it has not
        ended a second after closing its end. One stuck in the kernel may not die: left then."""
        pid, self._pid = self._pid, None
        if pid is None:
            return None
        if kill:
            os.kill(pid, signal.SIGKILL)
        for attempt in range(40):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if done:
                return status
            if attempt == 20:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        return None


def _describe_status(status: int | None) -> str:
    if status is None:
        return "status unknown"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _frame(message: Any) -> bytes:
    data = marshal.dumps(message)
    return len(data).to_bytes(_HEADER, "big") + data


def _child(job: Job, questions: int, writer: int) -> int:
    """The child's side: the question read (none: the parent did not need NVML after all), pynvml
    pointed at the library, the job run; its exit status."""
    faulthandler = sys.modules.get("faulthandler")  # a crash report (pytest turns it on) would be a line
    if faulthandler is not None:
        faulthandler.disable()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)

    def send(message: dict[str, Any]) -> None:
        data = memoryview(_frame(message))
        while data:
            data = data[os.write(writer, data) :]

    import pynvml  # noqa: PLC0415 - the child's work, beside the parent's

    asked = b""
    while chunk := os.read(questions, 4096):
        asked += chunk
    if not asked:
        return 0
    library, argument = marshal.loads(asked[_HEADER:])  # noqa: S302 - our parent's question
    try:
        point_at(pynvml, library)
    except LibraryError as exc:
        send({"error": exc.problem.reason, "absent": True})
        return 0
    except OSError as exc:
        send({"error": f"cannot load {library}: {exc}", "absent": True})
        return 0
    try:
        job(pynvml, argument, send)
    except BaseException as exc:  # one line for the parent, whatever it was
        send({"error": f"{type(exc).__name__}: {exc}".replace("\n", " ")})
        return 1
    return 0
