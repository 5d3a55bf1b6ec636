"""What ldconfig reads from a shared object: the same SONAMEs as a full ELF parser, and nothing at all
(never an exception) from files that are not shared objects or whose headers lie."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from cdictk.hooks.elfdso import read_dso
from cdictk.node.elfinfo import SonameReader

HOST_LIBS = Path("/usr/lib/x86_64-linux-gnu")


def _read(path: Path) -> tuple[int, bytes | None] | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        dso = read_dso(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return None if dso is None else (dso.flags, dso.soname)


def test_sonames_agree_with_a_full_parser_on_the_hosts_libraries() -> None:
    if not HOST_LIBS.is_dir():
        pytest.skip(f"no {HOST_LIBS} on this host")
    reader = SonameReader()
    checked = 0
    for path in sorted(HOST_LIBS.glob("*.so*"))[:300]:
        if path.is_symlink() or not path.is_file():
            continue
        found = _read(path)
        expected = reader.read(str(path))
        assert (found[1].decode() if found and found[1] else None) == expected, path
        if found is not None:
            assert found[0] == 0x0303  # libc6, x86-64
        checked += 1
    assert checked > 10


def test_programs_scripts_and_broken_files_are_no_libraries(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n" * 20)
    assert _read(script) is None
    program = Path(shutil.which("ls") or "/bin/ls")
    if program.read_bytes()[16] != 3:  # a PIE program is ET_DYN, which ldconfig would read too
        assert _read(program) is None


def test_truncated_and_scrambled_libraries_never_raise(tmp_path: Path) -> None:
    libc = HOST_LIBS / "libc.so.6"
    if not libc.exists():
        pytest.skip("no libc.so.6 to mangle")
    data = libc.resolve().read_bytes()
    rng = random.Random(1)  # noqa: S311 (a repeatable fuzz, not a secret)
    target = tmp_path / "lib.so"
    for size in (0, 16, 63, 64, 200, 1000, 5000, len(data) // 2):
        target.write_bytes(data[:size])
        _read(target)
    for _ in range(200):
        mangled = bytearray(data[:8192])
        for _ in range(20):
            mangled[rng.randrange(16, len(mangled))] = rng.randrange(256)
        target.write_bytes(bytes(mangled))
        _read(target)
