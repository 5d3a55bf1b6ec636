from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cdictk.node.elfinfo import SonameReader


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    out = tmp_path_factory.mktemp("elf")
    source = out / "stub.c"
    source.write_text("int stub(void) { return 0; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libstub.so.7", "-o", out / "with.so", source], check=True
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", out / "without.so", source], check=True)
    return out


def test_soname_of_a_shared_library(stubs: Path) -> None:
    reader = SonameReader()
    assert reader.read(str(stubs / "with.so")) == "libstub.so.7"
    assert reader.read(str(stubs / "with.so")) == "libstub.so.7"  # structs reused
    assert reader.read(str(stubs / "without.so")) is None


def test_not_elf_truncated_or_missing(stubs: Path, tmp_path: Path) -> None:
    reader = SonameReader()
    (tmp_path / "text").write_text("not an ELF file at all\n")
    data = (stubs / "with.so").read_bytes()
    (tmp_path / "head").write_bytes(data[:80])
    (tmp_path / "empty").write_bytes(b"")
    for name in ("text", "head", "empty", "missing"):
        assert reader.read(str(tmp_path / name)) is None
    assert reader.read(str(tmp_path)) is None  # a directory


def test_damaged_headers_never_raise(stubs: Path, tmp_path: Path) -> None:
    data = bytearray((stubs / "with.so").read_bytes())
    reader = SonameReader()
    for offset in range(0, 64 * 8, 5):
        damaged = bytearray(data)
        damaged[offset % len(damaged)] ^= 0xFF
        path = tmp_path / f"d{offset}.so"
        path.write_bytes(bytes(damaged))
        result = reader.read(str(path))
        assert result is None or isinstance(result, str)
