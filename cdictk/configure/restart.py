"""Making the daemon pick up its new config: ``--restart none|signal|systemd``.

``signal`` sends SIGHUP to the process listening on the daemon's socket (found from the socket's peer
credentials, not from a pid file that may be stale), for the engines whose daemon reloads its config on
SIGHUP; the others (containerd, which SIGHUP would stop) must be restarted through systemd. The unit,
the socket and the daemon's process names are in the engine's record.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess

from cdictk.configure.engines import ENGINES
from cdictk.startpath.helpers.errors import CdictkError


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def socket_owner(path: str) -> int:
    """The pid of the process that accepted our connection on the unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        try:
            client.connect(path)
        except OSError as exc:
            raise CdictkError(path, "", f"cannot connect to the daemon: {exc.strerror or exc}") from exc
        credentials = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", credentials)[0]
    return pid


def restart(runtime: str, how: str, socket_path: str | None = None) -> str:
    """Do it; a line saying what was done."""
    engine = ENGINES[runtime]
    if how == "none":
        return f"restart {runtime} (or use --restart) for the change to take effect"
    if how == "systemd":
        unit = engine.unit
        result = subprocess.run(["systemctl", "restart", unit], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            reason = (result.stderr.strip().splitlines() or ["failed"])[-1]
            raise CdictkError("", "--restart", f"systemctl restart {unit}: {reason}")
        return f"restarted {unit} with systemd"
    engine.check_restart(how)
    path = socket_path or engine.socket
    pid = socket_owner(path)
    # With socket activation the listener is systemd (pid 1), not the daemon: a SIGHUP there would
    # reload systemd and leave the daemon's config stale.
    name = _command_name(pid)
    if pid == 1 or name not in engine.daemons:
        raise CdictkError(
            path,
            "",
            f"is held by {name or 'an unknown process'} (pid {pid}), not {runtime}: use --restart systemd",
        )
    os.kill(pid, signal.SIGHUP)
    return f"sent SIGHUP to {runtime} (pid {pid}, listening on {path}) to reload its config"
