from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdictk.configure.restart import restart, socket_owner
from cdictk.startpath.helpers.errors import CdictkError

# A stand-in daemon: listens on a unix socket and notes a SIGHUP, as dockerd reloads on one.
DAEMON = """
import os, signal, socket, sys, time
path, note, name = sys.argv[1], sys.argv[2], sys.argv[3]
open("/proc/self/comm", "w").write(name)  # what the process is called, as ps and /proc show it
def reload(*_):  # the note appears whole (a rename), so the test never reads it half-written
    with open(note + ".new", "w") as out:
        out.write("reloaded")
    os.rename(note + ".new", note)
signal.signal(signal.SIGHUP, reload)
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(1)
print("ready", flush=True)
while True:
    connection, _ = server.accept()
    connection.close()
"""


def stand_in(tmp_path: Path, name: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", DAEMON, str(tmp_path / "docker.sock"), str(tmp_path / "note"), name]
    daemon = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert daemon.stdout is not None and daemon.stdout.readline().strip() == "ready"
    return daemon


def test_signal_reaches_the_process_on_the_socket(tmp_path: Path) -> None:
    sock, note = tmp_path / "docker.sock", tmp_path / "note"
    daemon = stand_in(tmp_path, "dockerd")
    try:
        assert socket_owner(str(sock)) == daemon.pid
        line = restart("docker", "signal", str(sock))
        assert f"pid {daemon.pid}" in line
        for _ in range(200):
            if note.exists():
                break
            time.sleep(0.05)
        assert note.read_text() == "reloaded"
    finally:
        daemon.kill()
        daemon.wait()


def test_no_daemon_and_containerd_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match="cannot connect to the daemon"):
        restart("docker", "signal", str(tmp_path / "none.sock"))
    with pytest.raises(CdictkError, match="containerd does not reload its config on a signal"):
        restart("containerd", "signal")
    assert "restart crio" in restart("crio", "none")


def test_a_listener_that_is_not_the_daemon_gets_no_signal(tmp_path: Path) -> None:
    """Socket activation: systemd (or anything else) holds the socket; it must not be sent SIGHUP."""
    daemon = stand_in(tmp_path, "systemd")
    try:
        with pytest.raises(
            CdictkError, match=r"is held by systemd \(pid \d+\), not docker: use --restart systemd"
        ):
            restart("docker", "signal", str(tmp_path / "docker.sock"))
        time.sleep(0.2)
        assert not (tmp_path / "note").exists()
    finally:
        daemon.kill()
        daemon.wait()
