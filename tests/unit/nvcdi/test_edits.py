"""The mount options of the IPC paths: what an MPS or persistenced client does works through them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cdictk.node.driverfiles import DriverFile, FileKind
from cdictk.nvcdi.edits import IPC, file_mount

CLIENT = """
import os, socket, subprocess, sys
source, target, flags = sys.argv[1:]
subprocess.run(["mount", "--bind", source, target], check=True)
subprocess.run(["mount", "-o", "remount,bind," + flags, target], check=True)
client = socket.socket(socket.AF_UNIX)
client.connect(target + "/control")  # the MPS control daemon's socket
client.sendall(b"hello")
client.close()
with open(target + "/pipe", "wb") as pipe:  # a FIFO the daemon made
    pipe.write(b"pipe")
try:
    open(target + "/planted", "x").close()
except OSError as exc:
    print("create:", exc.strerror)
"""


def test_the_ipc_paths_are_read_only_binds() -> None:
    for kind in (FileKind.SOCKET, FileKind.DIRECTORY):
        options = file_mount(DriverFile("/tmp/nvidia-mps", "/h/tmp/nvidia-mps", kind)).options
        assert options == IPC
        assert {"ro", "nosuid", "nodev", "noexec", "rbind"} <= set(options)


@pytest.mark.root
def test_a_client_connects_and_writes_the_pipes_through_the_read_only_bind(tmp_path: Path) -> None:
    """Why the MPS pipe directory is mounted read-only: clients only connect to the daemon's sockets
    and open its FIFOs, which the kernel checks on the inode, never on the mount."""
    source, target = tmp_path / "mps", tmp_path / "in-container"
    source.mkdir()
    target.mkdir()
    os.mkfifo(source / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(source / "control"))
    server.listen()
    server.settimeout(20)
    got: dict[str, bytes] = {}

    def serve() -> None:
        connection, _ = server.accept()
        got["socket"] = connection.recv(16)
        connection.close()

    def read_pipe() -> None:
        with open(source / "pipe", "rb") as pipe:
            got["pipe"] = pipe.read()

    threads = [threading.Thread(target=serve), threading.Thread(target=read_pipe)]
    for thread in threads:
        thread.start()
    flags = ",".join(option for option in IPC if option not in ("rbind", "rprivate"))
    result = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            CLIENT,
            str(source),
            str(target),
            flags,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    for thread in threads:
        thread.join(20)
    server.close()
    assert result.returncode == 0, result.stderr
    assert got == {"socket": b"hello", "pipe": b"pipe"}
    assert result.stdout.strip() == "create: Read-only file system"
    assert not (source / "planted").exists()
