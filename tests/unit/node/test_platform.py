"""Which platform a node is: WSL2 before Jetson before a GPU host, from the driver root and sysfs."""

from __future__ import annotations

from pathlib import Path

from cdictk.node.platform import Platform, detect, is_integrated_gpu, is_tegra
from cdictk.startpath.helpers.roots import Roots


def roots_at(root: Path) -> Roots:
    return Roots(str(root), str(root), str(root / "proc"), str(root / "sys"))


def test_a_plain_root_is_a_gpu_host(tmp_path: Path) -> None:
    assert detect(roots_at(tmp_path)) is Platform.GPU_HOST


def test_libdxcore_makes_it_wsl_even_with_tegra_signs(tmp_path: Path) -> None:
    (tmp_path / "usr/lib/wsl/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/wsl/lib/libdxcore.so").write_bytes(b"\x7fELF")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R36\n")
    assert detect(roots_at(tmp_path)) is Platform.WSL


def test_libdxcore_must_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "usr/lib/wsl/lib/libdxcore.so").mkdir(parents=True)
    assert detect(roots_at(tmp_path)) is Platform.GPU_HOST


def test_tegra_by_release_file_or_soc_family(tmp_path: Path) -> None:
    roots = roots_at(tmp_path)
    (tmp_path / "sys/devices/soc0").mkdir(parents=True)
    (tmp_path / "sys/devices/soc0/family").write_text("Intel\n")
    assert not is_tegra(roots)
    (tmp_path / "sys/devices/soc0/family").write_text("Tegra\n")
    assert is_tegra(roots) and detect(roots) is Platform.TEGRA
    other = tmp_path / "other"
    (other / "etc").mkdir(parents=True)
    (other / "etc/nv_tegra_release").write_text("# R35\n")
    assert detect(roots_at(other)) is Platform.TEGRA


def test_integrated_gpu_names() -> None:
    assert is_integrated_gpu("Orin (nvgpu)") and is_integrated_gpu("NVIDIA Thor")
    assert not is_integrated_gpu("NVIDIA RTX 6000 Ada Generation") and not is_integrated_gpu("NVIDIA H100")
