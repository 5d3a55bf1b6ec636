"""``cdictk cdi generate --watch`` on the fake node: a MIG reconfiguration reaches the spec, nothing
else rewrites it, and SIGTERM stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest

from cdictk.cli.main import main
from tests.conftest import NodeFactory
from tests.fakenode.node import _mig

DEADLINE = 10.0  # seconds; the measured time (about half a second) is printed, not asserted


def wait_for(condition: object, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < DEADLINE:
        if condition():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {DEADLINE} s")


@pytest.mark.root
def test_a_mig_change_reaches_the_spec_and_nothing_else_rewrites_it(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("eight")
    output = tmp_path / "cdi" / "nvidia.yaml"
    command = [sys.executable, "-m", "cdictk", "cdi", "generate", "--watch", *node.cli_args()]
    process = subprocess.Popen([*command, "--output", str(output)], stderr=subprocess.PIPE, text=True)
    try:
        wait_for(output.exists, "the first spec")
        first = output.read_text()
        inode = output.stat().st_ino
        assert "MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000002" in first
        time.sleep(2.5)  # two looks at an unchanged node
        assert output.stat().st_ino == inode

        node.reconfigure_mig(node.preset.migs[:2])  # `nvidia-smi mig -dci -dgi` of the third
        took = wait_for(lambda: output.read_text() != first, "the MIG change")
        print(f"MIG reconfiguration in the spec after {took:.2f} s")
        assert "MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000002" not in output.read_text()
        node.reconfigure_mig((*node.preset.migs, _mig(2, 11, "1g.10gb", 1, 9856)))  # and a new one
        wait_for(lambda: "MIG-9f2e7d3c-1b4a-5e6f-8a9b-000000000002" in output.read_text(), "a new MIG")
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(DEADLINE)
        err = process.stderr.read() if process.stderr else ""
    assert code == 0, err
    assert err.count("wrote ") == 3 and err.rstrip().endswith(f"stopped watching for {output}")


@pytest.mark.root
def test_a_driver_that_goes_away_keeps_the_spec_until_it_is_back(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    gpus = Path(node.proc, "driver/nvidia/gpus")
    nvml = Path(node.lib_dir, "fake-nvml.conf")
    command = [sys.executable, "-m", "cdictk", "cdi", "generate", "--watch", "--interval", "0.2"]
    process = subprocess.Popen(
        [*command, *node.cli_args(), "--output", str(output)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(output.exists, "the first spec")
        spec = output.read_bytes()
        gpus.rename(tmp_path / "gpus")  # the module is unloaded for an upgrade: no GPU anywhere
        nvml.rename(tmp_path / "fake-nvml.conf")
        time.sleep(1)
        assert output.read_bytes() == spec
        (tmp_path / "fake-nvml.conf").rename(nvml)  # back
        (tmp_path / "gpus").rename(gpus)
        time.sleep(1)
        assert output.read_bytes() == spec
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(DEADLINE)
        err = process.stderr.read() if process.stderr else ""
    assert code == 0, err
    assert "spec not updated, the one there stays" in err and "the spec is updated again" in err


@pytest.mark.parametrize("extra", [["--output", "-"], ["--check"]])
def test_watch_needs_a_file(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cdi", "generate", "--watch", *extra]) == 1
    assert "--watch" in capsys.readouterr().err


@pytest.mark.root
def test_host_root_writes_the_nodes_paths(make_node: NodeFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """A DaemonSet sees the node at /host: the spec must name /dev/nvidia0, not /host/dev/nvidia0."""
    node = make_node("single")
    assert main(["cdi", "generate", *node.cli_args(), "--output", "-"]) == 0
    plain = capsys.readouterr().out
    assert main(["cdi", "generate", *node.cli_args(), "--host-root", node.root, "--output", "-"]) == 0
    stripped = capsys.readouterr().out
    assert node.root in plain and node.root not in stripped
    assert f"hostPath: {node.lib_dir}/libcuda.so.{node.version}" in plain
    assert f"hostPath: {node.lib_dir[len(node.root) :]}/libcuda.so.{node.version}" in stripped
    assert stripped.count("- path: /dev/nvidia0") == plain.count("- path: /dev/nvidia0")


@pytest.mark.root
def test_a_spec_deleted_or_changed_under_the_watch_is_put_back(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    output = tmp_path / "nvidia.yaml"
    command = [sys.executable, "-m", "cdictk", "cdi", "generate", "--watch", "--interval", "0.2"]
    process = subprocess.Popen(
        [*command, *node.cli_args(), "--output", str(output)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(output.exists, "the first spec")
        spec = output.read_bytes()
        output.unlink()
        wait_for(output.exists, "the spec back after a delete")
        output.write_text("garbage")
        wait_for(lambda: output.read_bytes() == spec, "the spec back after an overwrite")
        output.chmod(0o600)
        wait_for(lambda: output.stat().st_mode & 0o777 == 0o644, "the spec's mode back")
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(DEADLINE)
        err = process.stderr.read() if process.stderr else ""
    assert code == 0, err


@pytest.mark.root
def test_an_output_that_is_not_a_file_ends_the_watch(make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("single")
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "nvidia.yaml").symlink_to(tmp_path / "elsewhere")
    command = [sys.executable, "-m", "cdictk", "cdi", "generate", "--watch", *node.cli_args()]
    result = subprocess.run(
        [*command, "--output", str(tmp_path / "nvidia.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert (
        result.stderr.splitlines()[-1].startswith("cdictk: error: ") and "not a regular file" in result.stderr
    )
    assert (tmp_path / "elsewhere").read_text() == ""


def test_a_spec_removed_right_after_the_write_is_still_put_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The race behind a flaky run of the test above: the output was stamped by looking at the path
    again after the write, so a spec removed in that moment was remembered as ours and never put back."""
    from cdictk.nvcdi.nodespec import NodeSpec
    from cdictk.nvcdi.specfile import WatchedSpec
    from cdictk.startpath.helpers import fsutil
    from cdictk.startpath.helpers.roots import Roots

    class Made:
        """What the watch uses of a NodeSpec."""

        summary = "1 device"

        def __init__(self) -> None:
            self.warnings: list[str] = []

        def dump(self, fmt: str) -> bytes:
            return b"spec\n"

    output = tmp_path / "nvidia.yaml"
    real_write = fsutil.atomic_write

    def write_then_lose(path: str, data: bytes, **options: object) -> object:
        written = real_write(path, data, **options)  # type: ignore[arg-type]
        os.unlink(path)  # someone removes it before the watch looks at it
        return written

    monkeypatch.setattr("cdictk.nvcdi.specfile.atomic_write", write_then_lose)
    node = tmp_path / "node"
    roots = Roots.from_options(str(node), str(node), str(node / "proc"), str(node / "sys"))
    said: list[str] = []
    watched = WatchedSpec(
        lambda: cast(NodeSpec, Made()),
        roots=roots,
        output=str(output),
        fmt="yaml",
        say=said.append,
        warn=said.append,
    )
    before = watched.fingerprint()
    watched.regenerate()
    assert not output.exists()
    assert watched.fingerprint() != before  # so the watch generates again at its next look

    monkeypatch.setattr("cdictk.nvcdi.specfile.atomic_write", real_write)
    watched.regenerate()
    assert output.read_bytes() == b"spec\n"
    assert watched.fingerprint() == watched.fingerprint()  # and then rests
    settled = watched.fingerprint()
    watched.regenerate()  # unchanged: not written again
    assert watched.fingerprint() == settled
    assert said == [f"wrote {output} (1 device)"] * 2
