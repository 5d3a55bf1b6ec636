"""Libraries with a CUDA forward-compatibility note, built with gcc: shared by the tests of the note
reader (test_elfnote.py) and of the hook that reads it (test_cudacompat.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SECTION = ".note.cuda.fwd_compatibility"
OWNER = "NVIDIA Corporation"
NOTE_JSON = {"Format": 1, "CUDA Version": "12.8", "Driver": [535, 550, 570], "Device": []}


def _c_bytes(data: bytes) -> str:
    return ", ".join(str(byte) for byte in data) or "0"


def _align4(value: int) -> int:
    return (value + 3) & ~3


def _note_source(owner: str, desc: bytes, descsz: int | None = None) -> str:
    name = owner.encode() + b"\0"
    return (
        # A section whose name starts with ".note" becomes SHT_NOTE with GNU as (checked with readelf below).
        f'__attribute__((section("{SECTION}"), aligned(4), used))\n'
        "static const struct { unsigned int namesz, descsz, type;"
        f" unsigned char name[{_align4(len(name))}]; unsigned char desc[{max(4, _align4(len(desc)))}]; }} note = {{\n"
        f"  {len(name)}, {len(desc) if descsz is None else descsz}, 1, {{{_c_bytes(name)}}}, {{{_c_bytes(desc)}}}\n"
        "};\n"
        "int cuInit(unsigned int flags) { return (int)flags; }\n"
    )


def _gcc(out: Path, name: str, source: str, *, m32: bool = False) -> Path:
    src = out / f"{name}.c"
    src.write_text(source)
    target = out / name
    # No 32-bit libc or libgcc is needed: the library calls nothing.
    extra = ["-m32", "-nostdlib"] if m32 else []
    subprocess.run(
        ["gcc", "-shared", "-fPIC", *extra, "-Wl,-soname,libcuda.so.1", "-o", str(target), str(src)],
        check=True,
        capture_output=True,
    )
    return target


class Libs:
    def __init__(self, out: Path) -> None:
        desc = json.dumps(NOTE_JSON, separators=(",", ":")).encode()
        self.note = _gcc(out, "note.so", _note_source(OWNER, desc))
        self.plain = _gcc(out, "plain.so", "int cuInit(unsigned int flags) { return (int)flags; }\n")
        # descsz counts the NUL padding, as some producers write it.
        self.padded = _gcc(out, "padded.so", _note_source(OWNER, desc + b"\0\0\0", len(desc) + 3))
        self.bad_json = _gcc(out, "badjson.so", _note_source(OWNER, b'{"Format":1,"Driver":[535,'))
        self.other_owner = _gcc(out, "other.so", _note_source("Other Corporation", desc))
        old = dict(NOTE_JSON, Driver=[535])
        self.old_drivers = _gcc(out, "old.so", _note_source(OWNER, json.dumps(old).encode()))
        self.desc = desc
        self.m32: Path | None = None
        self.m32_why = ""
        try:
            self.m32 = _gcc(out, "m32.so", _note_source(OWNER, desc), m32=True)
        except subprocess.CalledProcessError as exc:
            lines = exc.stderr.decode(errors="replace").strip().splitlines()
            self.m32_why = lines[-1] if lines else f"exit status {exc.returncode}"


def build_libs(tmp_path_factory: pytest.TempPathFactory) -> Libs:
    if shutil.which("gcc") is None:
        print("gcc is not installed (tests/setup-host.sh installs it)")
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    return Libs(tmp_path_factory.mktemp("cudacompat-elf"))
