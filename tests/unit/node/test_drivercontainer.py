"""A driver container's tree at /run/nvidia/driver is used only when the given root has no driver."""

from __future__ import annotations

from pathlib import Path

from cdictk.node.drivercontainer import has_driver, in_driver_container
from cdictk.startpath.helpers.roots import Roots

LIB = "/usr/lib/x86_64-linux-gnu"


def _driver(root: Path, name: str = "libcuda.so.1") -> None:
    lib = root / LIB.lstrip("/")
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libcuda.so.580.95.05").write_bytes(b"\x7fELF")
    (lib / name).symlink_to("libcuda.so.580.95.05")


def test_has_driver_wants_libcuda_or_nvml(tmp_path: Path) -> None:
    assert not has_driver(str(tmp_path), [LIB])
    _driver(tmp_path, "libnvidia-ml.so.1")
    assert has_driver(str(tmp_path), [LIB])


def test_the_tree_is_used_when_the_root_has_no_driver(tmp_path: Path) -> None:
    tree = tmp_path / "run/nvidia/driver"
    _driver(tree)
    warnings: list[str] = []
    moved = in_driver_container(Roots(str(tmp_path), str(tmp_path)), [LIB], warnings)
    assert moved is not None
    roots, dirs = moved
    assert roots.driver == str(tree)
    assert roots.dev == str(tmp_path)  # the kernel's nodes are the node's
    assert LIB in dirs
    assert warnings == [
        f"no driver under {tmp_path}; using the driver container's at {tree} (--driver-root {tree})"
    ]


def test_a_root_with_a_driver_stays(tmp_path: Path) -> None:
    _driver(tmp_path)
    _driver(tmp_path / "run/nvidia/driver")
    assert in_driver_container(Roots(str(tmp_path)), [LIB], []) is None


def test_an_empty_tree_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "run/nvidia/driver").mkdir(parents=True)
    warnings: list[str] = []
    assert in_driver_container(Roots(str(tmp_path)), [LIB], warnings) is None
    assert warnings == []
