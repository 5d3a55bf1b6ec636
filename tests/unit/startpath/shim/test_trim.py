"""NVIDIA_DRIVER_CAPABILITIES trims a spec's driver mounts and the links that would only dangle."""

from __future__ import annotations

from typing import Any

from cdictk.cdi.dump import to_data
from cdictk.cdi.model import ContainerEdits, Hook, Mount
from cdictk.startpath.shim.trim import trim_edits

LIB = "/usr/lib/x86_64-linux-gnu"
V = "580.95.05"


def edits() -> dict[str, Any]:
    """A spec's common edits as the engine reads them (the spec's JSON shape)."""
    paths = [
        f"{LIB}/libcuda.so.{V}",
        f"{LIB}/libGLX_nvidia.so.{V}",
        "/usr/bin/nvidia-smi",
        "/lib/firmware/nvidia/x.bin",
    ]
    links = [
        f"libcuda.so.{V}::{LIB}/libcuda.so.1",
        f"libcuda.so.1::{LIB}/libcuda.so",
        f"libGLX_nvidia.so.{V}::{LIB}/libGLX_nvidia.so.0",
        f"libGLX_nvidia.so.0::{LIB}/libGLX_indirect.so.0",
        "../card1::/dev/dri/by-path/pci-0000:18:00.0-card",
    ]
    args = ["/usr/bin/python3", "-I", "-S", "/x/__main__.py", "batch"]
    for link in links:
        args += ["--device-link" if link.startswith("../") else "--link", link]
    args += ["--folder", LIB]
    return to_data(
        ContainerEdits(
            mounts=[Mount(host_path=p, container_path=p, options=["ro"]) for p in paths],
            hooks=[Hook(hook_name="createContainer", path=args[0], args=args, env=["LC_ALL=C"])],
        )
    )


def test_the_default_capabilities_drop_graphics_files_and_their_links() -> None:
    common = edits()
    trim_edits([common], frozenset({"utility", "compute"}))
    assert [m["containerPath"] for m in common["mounts"]] == [
        f"{LIB}/libcuda.so.{V}",
        "/usr/bin/nvidia-smi",
        "/lib/firmware/nvidia/x.bin",
    ]
    args = common["hooks"][0]["args"]
    assert f"libcuda.so.1::{LIB}/libcuda.so" in args and f"libcuda.so.{V}::{LIB}/libcuda.so.1" in args
    assert not [a for a in args if "GLX" in a]  # the link to the link to the dropped library went too
    assert "../card1::/dev/dri/by-path/pci-0000:18:00.0-card" in args
    assert args[-2:] == ["--folder", LIB]
    assert args.count("--link") == 2 and args.count("--device-link") == 1


def test_utility_alone_drops_libcuda_and_everything_keeps_everything() -> None:
    common = edits()
    trim_edits([common], frozenset({"utility"}))
    assert [m["containerPath"] for m in common["mounts"]] == [
        "/usr/bin/nvidia-smi",
        "/lib/firmware/nvidia/x.bin",
    ]
    assert not [a for a in common["hooks"][0]["args"] if "libcuda" in a]
    full = edits()
    trim_edits([full], frozenset({"all"}))
    assert full == edits()
