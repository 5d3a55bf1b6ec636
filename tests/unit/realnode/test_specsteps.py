"""realnode/specsteps.py: the specs' rows and the roots each generator is given."""

from __future__ import annotations

from pathlib import Path

from realnode.nodefacts import Roots
from realnode.specsteps import cdictk_roots, host_view, nvidia_roots


def test_a_real_node_is_generated_for_with_the_tools_own_defaults() -> None:
    live = Roots()
    assert cdictk_roots(live) == []
    assert host_view(live) == []  # nvidia-ctk reads the node's own procfs and sysfs
    assert nvidia_roots(live)[0] == []


def test_a_fake_node_is_named_to_both_tools(tmp_path: Path) -> None:
    fake = Roots(str(tmp_path), str(tmp_path), str(tmp_path / "proc"), str(tmp_path / "sys"))
    assert cdictk_roots(fake) == [
        "--driver-root", str(tmp_path), "--dev-root", str(tmp_path),
        "--proc-root", str(tmp_path / "proc"), "--sys-root", str(tmp_path / "sys"),
    ]  # fmt: skip
    assert nvidia_roots(fake) == [["--driver-root", str(tmp_path), "--dev-root", str(tmp_path)]]
    # a driver tree of the node's own (GKE-like) is tried after the node's roots
    (tmp_path / "usr/local/nvidia/lib64").mkdir(parents=True)
    (tmp_path / "usr/local/nvidia/lib64/libcuda.so.1").write_bytes(b"")
    tree = str(tmp_path / "usr/local/nvidia")
    assert nvidia_roots(fake)[1] == ["--driver-root", tree, "--dev-root", str(tmp_path)]
