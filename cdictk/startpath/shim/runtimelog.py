"""Where ``cdictk-runtime`` says why a container does not start, and what it warns of: the runtime log
the engine names with ``--log``, written as runc writes it (``--log-format json`` or ``text``), so
that the engine reads the reason back as it reads runc's.

containerd's runc shim runs its runtime with ``--log <bundle>/log.json --log-format json`` and, when a
command fails, reports the ``msg`` of the file's last ``"level":"error"`` line (``kubectl describe``
shows it after ``OCI runtime create failed:``); without such a line it reports only that it could not
retrieve the runtime's error. Under that shim the runtime's stderr during ``create`` is the
container's own, which its log collects: a warning written there would be the workload's first line.
So with a ``--log``, warnings go to that file alone. Errors go to stderr as well, as runc writes
its own (callers that read the runtime's stderr, conmon among them, see them there); without a
``--log``, both go to stderr, as runc's do.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# runc's and crun's global options that take a value: the subcommand is the first other word.
GLOBAL_VALUES = ("--root", "--log", "--log-format", "--criu", "--rootless", "--cgroup-manager")


class RuntimeLog:
    """The file ``--log`` names (None: none), and whether ``--log-format`` asks for JSON."""

    __slots__ = ("json", "path")

    def __init__(self, path: str | None, *, json: bool) -> None:
        self.path = path
        self.json = json

    @classmethod
    def from_args(cls, args: Sequence[str]) -> RuntimeLog:
        """The log runc would write with ``args``: the global ``--log`` and ``--log-format`` (a value
        in the next word or after ``=``) before the subcommand; the last given counts, as with runc."""
        found = {"--log": "", "--log-format": ""}
        index = 0
        while index < len(args):
            arg = args[index]
            if not arg.startswith("-"):
                break
            name, equals, value = arg.partition("=")
            if not equals and arg in GLOBAL_VALUES:
                index += 1
                value = args[index] if index < len(args) else ""
            if name in found:
                found[name] = value
            index += 1
        return cls(found["--log"] or None, json=found["--log-format"] == "json")

    def error(self, line: str) -> None:
        """``line`` (the shim's one line) as the log's last error, and on stderr."""
        self._log("error", line)
        _stderr(line)

    def warning(self, line: str) -> None:
        """``line`` in the log; on stderr only when there is no log, or it cannot be written."""
        if not self._log("warning", line):
            _stderr(line)

    def _log(self, level: str, line: str) -> bool:
        """Append ``line`` at ``level`` to the log; False when there is none or it cannot be written."""
        if self.path is None:
            return False
        # RFC 3339, which containerd parses the time as (a line it cannot parse hides every error).
        import time  # noqa: PLC0415

        from cdictk.startpath.helpers.strictjson import dumps  # noqa: PLC0415 - only when there is something to say

        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if self.json:
            record = dumps({"level": level, "msg": line, "time": stamp})  # logrus's keys, in its order
        else:
            record = b'time="%s" level=%s msg=%s' % (stamp.encode(), level.encode(), dumps(line))
        try:
            # As runc opens it: appended to, never truncated, made 0644 when missing.
            fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOCTTY, 0o644
            )
        except OSError:
            return False
        try:
            os.write(fd, record + b"\n")  # one write: a line another writer cannot split
        except OSError:
            return False
        finally:
            os.close(fd)
        return True


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)
