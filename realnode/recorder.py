"""The check's rows and report: each step timed, recorded, printed as soon as it is known.

A node is held for minutes, so whatever happens the table and the report must come back: every step
runs under :meth:`Recorder.step`, which records an exception or a timeout as a failed row and goes on;
the JSON report is rewritten after every row, so a check killed at its time limit still leaves the
rows so far. Commands run through :meth:`Recorder.run`: output to files (a container's init may keep a
pipe open long after runc exits), a timeout that kills the whole process group, and every command line
with the tail of its output in the log.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

PASS, FAIL, SKIP, INFO = "pass", "FAIL", "skip", "info"
WIDTH = 44  # the step column
TAIL = 1500  # characters of a failed command's output kept in its row


class StepFailed(Exception):
    """A step's own verdict: one line, the row's detail."""


class StepSkipped(Exception):
    """The step cannot run here (a tool the bundle lacks): one line, the row's detail."""


def wait_exact(process: subprocess.Popen[bytes], timeout: float) -> int:
    """Waits for ``process`` to end and returns its exit status; raises TimeoutExpired after ``timeout``.

    ``Popen.wait(timeout)`` polls with sleeps that double up to 50 ms, so a start timed through it comes
    out as 31, 63, 113 or 163 ms whatever it really took; a pidfd wakes us when the process ends.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # Linux before 5.3: a thread kills the process at the timeout instead
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            returncode = process.wait()
        finally:
            timer.cancel()
        if fired.is_set():
            raise subprocess.TimeoutExpired(process.args, timeout) from None
        return returncode
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            raise subprocess.TimeoutExpired(process.args, timeout)
    finally:
        os.close(pidfd)
    return process.wait()


@dataclass
class Row:
    name: str
    status: str
    seconds: float
    detail: str
    tail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    """A finished command: its exit status (None after a timeout), output, and wall time in ms."""

    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    ms: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, size: int = TAIL) -> str:
        """The end of stderr, then the end of stdout, in ``size`` characters: a long output on one
        stream does not push the other's last lines (the error, most often) out."""
        err, out = self.stderr.strip(), self.stdout.strip()
        if len(err) + len(out) + 1 > size:
            keep_err = min(len(err), max(size // 2, size - 1 - len(out)))
            err, out = err[len(err) - keep_err :], out[len(out) - (size - 1 - keep_err) :]
        return (err + "\n" + out).strip()

    def why(self) -> str:
        """One line: how it ended and the last line it wrote to stderr (where programs say what went
        wrong), else to stdout."""
        end = "timed out" if self.returncode is None else f"exit {self.returncode}"
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        lines = lines or [line for line in self.stdout.splitlines() if line.strip()]
        return f"{os.path.basename(self.command[0])}: {end}" + (f": {lines[-1].strip()}" if lines else "")


class Recorder:
    """The rows, the report beside them, and the log of every command."""

    def __init__(self, out: str, report_name: str, log_name: str, budget: float) -> None:
        self.out = out
        self.report_path = os.path.join(out, report_name)
        self.log: TextIO = open(os.path.join(out, log_name), "w", encoding="utf-8")  # noqa: SIM115
        self.rows: list[Row] = []
        self.sections: dict[str, Any] = {}
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self._header_printed = False
        self._lock = threading.Lock()  # the burst's threads log too

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        """Seconds left of the check's budget."""
        return self.deadline - time.monotonic()

    def note(self, text: str) -> None:
        with self._lock:
            self.log.write(text.rstrip("\n") + "\n")
            self.log.flush()

    def run(
        self,
        command: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        quiet: bool = False,
    ) -> Result:
        """Runs ``command`` to the end or to ``timeout`` seconds (never past the budget's end, but at
        least 5 s); on a timeout its whole process group is killed and ``returncode`` is None."""
        timeout = max(5.0, min(timeout, self.left()))
        words = [str(word) for word in command]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            began = time.perf_counter()
            try:
                process = subprocess.Popen(
                    words,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=dict(env) if env is not None else None,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as error:
                result = Result(words, 127, "", f"{words[0]}: {error.strerror}", 0.0)
                self._log_result(result, quiet)
                return result
            try:
                returncode: int | None = wait_exact(process, timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                returncode = None
            ms = (time.perf_counter() - began) * 1000
            out.seek(0)
            err.seek(0)
            result = Result(
                words,
                returncode,
                out.read().decode(errors="replace"),
                err.read().decode(errors="replace"),
                ms,
            )
        self._log_result(result, quiet)
        return result

    def _log_result(self, result: Result, quiet: bool) -> None:
        end = "timed out" if result.returncode is None else f"exit {result.returncode}"
        self.note(f"$ {' '.join(result.command)}\n  ({end}, {result.ms:.0f} ms)")
        if not quiet or not result.ok:
            for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
                if text.strip():
                    self.note(f"  {name}:\n" + "\n".join("    " + line for line in text[-8000:].splitlines()))

    def need(self, seconds: float) -> None:
        """Skips the step (the first thing its body does) when less than ``seconds`` of the budget is
        left: a step that cannot finish would spend the time of those after it."""
        if self.left() < seconds:
            raise StepSkipped(f"{self.left():.0f} s of the budget left, the step needs about {seconds:.0f}")

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[Row]:
        """One row: the body fills in ``detail`` and ``data``; StepFailed, StepSkipped (:meth:`need`
        among them) and any other exception end it with that status."""
        row = Row(name, PASS, 0.0, "")
        began = time.monotonic()
        try:
            yield row
        except StepFailed as failed:
            row.status, row.detail = FAIL, str(failed)
        except StepSkipped as skipped:
            row.status, row.detail = SKIP, str(skipped)
        except Exception as error:  # any failure is a row, and the check goes on
            row.status, row.detail = FAIL, f"{type(error).__name__}: {error}"
        finally:
            row.seconds = time.monotonic() - began
            self.rows.append(row)
            self.print_row(row)
            self.save()

    def fail(self, row: Row, result: Result, detail: str = "") -> None:
        """Ends ``row`` as failed by ``result``, its output's tail kept."""
        row.tail = result.tail()
        raise StepFailed(detail or result.why())

    def print_row(self, row: Row) -> None:
        if not self._header_printed:
            print(f"{'STEP':<{WIDTH}} {'RESULT':<6} {'SECONDS':>7}  DETAIL", flush=True)
            self._header_printed = True
        print(f"{row.name:<{WIDTH}} {row.status:<6} {row.seconds:>7.1f}  {row.detail}", flush=True)
        if row.status == FAIL and row.tail:
            for line in row.tail.splitlines()[-6:]:
                print(f"{'':<{WIDTH}} | {line[:200]}", flush=True)

    def save(self) -> None:
        counts = {
            status: sum(row.status == status for row in self.rows) for status in (PASS, FAIL, SKIP, INFO)
        }
        report = {
            "summary": {**counts, "seconds": round(time.monotonic() - self.started, 1)},
            **self.sections,
            "steps": [asdict(row) for row in self.rows],
        }
        temp = self.report_path + ".tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2, sort_keys=False, default=str)
        os.replace(temp, self.report_path)

    def close(self) -> None:
        self.save()
        self.log.close()

    def failed(self) -> list[Row]:
        return [row for row in self.rows if row.status == FAIL]


def say(text: str) -> None:
    print(text, flush=True)
    sys.stdout.flush()
