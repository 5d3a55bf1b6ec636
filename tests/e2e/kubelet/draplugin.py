"""``cdictk dra-plugin`` as the process a node runs, for a fake node and the API server stand-in: what
the DRA end-to-end tests and bench/k8s.py each start."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fakenode.node import FakeNode


def plugin_command(
    node: FakeNode,
    node_name: str,
    *,
    kubeconfig: Path,
    registry: Path,
    plugin_dir: Path,
    cdi_dir: Path,
    resync: float = 1.0,
) -> list[str]:
    """The plugin for ``node`` as ``node_name``, registering in ``registry``, its claims' specs in
    ``cdi_dir``; it lists its slices every ``resync`` seconds (a test's wipe or MIG change shows soon)."""
    return [
        sys.executable, "-m", "cdictk", "dra-plugin", "--node-name", node_name,
        "--kubeconfig", str(kubeconfig), "--registry-dir", str(registry),
        "--plugin-dir", str(plugin_dir), "--cdi-dir", str(cdi_dir), *node.cli_args(),
        "--resync", str(resync),
    ]  # fmt: skip


@dataclass
class PluginProcess:
    """``cdictk dra-plugin`` as a subprocess, its stderr in ``log``."""

    command: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=log)

    def stop(self) -> int:
        """SIGTERM, and its exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=30)
        self.process = None
        return code

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, line: str, count: int = 1, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.text().count(line) < count:
            assert self.process is not None and self.process.poll() is None, self.text()
            assert time.monotonic() < deadline, f"timed out waiting for {line!r}:\n{self.text()}"
            time.sleep(0.05)
