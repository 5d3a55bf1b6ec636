"""realnode/carried.py: the bundle's programs unpacked, runc's libseccomp entry rewritten."""

from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import pytest

from realnode.carried import MANIFEST, needed_at, prepare, unpack

# A string table as an ELF file has it: NUL-separated names, libseccomp.so.2 among them.
STRINGS = b"\x7fELF....\0libc.so.6\0libseccomp.so.2\0GLIBC_2.34\0tail"


def test_the_entry_becomes_a_link_of_the_same_length_to_the_carried_library(tmp_path: Path) -> None:
    binary = tmp_path / "runc"
    binary.write_bytes(STRINGS)
    library = tmp_path / "lib" / "libseccomp.so.2"
    library.parent.mkdir()
    library.write_text("the library")
    link = needed_at(str(binary), str(library))
    try:
        assert link.startswith("/tmp/sc") and len(link) == len("libseccomp.so.2")
        assert os.readlink(link) == str(library)
        rewritten = binary.read_bytes()
        assert len(rewritten) == len(STRINGS)
        assert rewritten == STRINGS.replace(b"libseccomp.so.2", link.encode())
        assert b"\0libc.so.6\0" in rewritten and rewritten.endswith(b"\0GLIBC_2.34\0tail")
    finally:
        os.unlink(link)


@pytest.mark.parametrize(
    "data", [b"\0libc.so.6\0", b"\0libseccomp.so.2\0x\0libseccomp.so.2\0", b"libseccomp.so.2.5\0"]
)
def test_a_binary_without_exactly_one_entry_is_left_alone(tmp_path: Path, data: bytes) -> None:
    binary = tmp_path / "runc"
    binary.write_bytes(data)
    with pytest.raises(ValueError, match=r"expected one libseccomp\.so\.2 entry"):
        needed_at(str(binary), str(tmp_path / "lib"))
    assert binary.read_bytes() == data


def test_packed_and_plain_files_unpack_as_programs(tmp_path: Path) -> None:
    packed = tmp_path / "busybox.xz"
    with lzma.open(packed, "wb") as handle:
        handle.write(b"busybox bytes" * 1000)
    plain = tmp_path / "probe"
    plain.write_bytes(b"probe bytes")
    unpacked = unpack(str(packed), str(tmp_path / "work/bin/busybox"))
    assert Path(unpacked).read_bytes() == b"busybox bytes" * 1000
    assert os.stat(unpacked).st_mode & 0o777 == 0o755
    assert Path(unpack(str(plain), str(tmp_path / "work/bin/probe"))).read_bytes() == b"probe bytes"


def test_a_bundle_is_made_ready_in_the_work_dir(tmp_path: Path) -> None:
    bundle, work = tmp_path / "bundle", tmp_path / "work"
    for name, data in (("bin/runc", STRINGS), ("bin/busybox", b"bb"), ("nvidia/nvidia-ctk", b"ctk")):
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        with lzma.open(bundle / f"{name}.xz", "wb") as handle:
            handle.write(data)
    for name in ("bin/cuda-probe", "lib/libseccomp.so.2", "src/cuda_check.cu", "runtime/node-runtime.tar.xz"):
        (bundle / name).parent.mkdir(parents=True, exist_ok=True)
        (bundle / name).write_text(name)
    (bundle / "wheels").mkdir()
    files = {
        "runc": "bin/runc.xz",
        "busybox": "bin/busybox.xz",
        "probe": "bin/cuda-probe",
        "cuda_source": "src/cuda_check.cu",
        "wheels": "wheels",
        "libseccomp": "lib/libseccomp.so.2",
        "node_runtime": "runtime/node-runtime.tar.xz",
    }
    (bundle / MANIFEST).write_text(
        json.dumps({"files": files, "nvidia": {"nvidia-ctk": "nvidia/nvidia-ctk.xz"}})
    )
    carried = prepare(str(bundle), str(work))
    try:
        assert carried.runc == str(work / "bin/runc")
        assert carried.seccomp_link is not None
        assert os.readlink(carried.seccomp_link) == str(work / "lib/libseccomp.so.2")
        assert carried.seccomp_link.encode() in Path(carried.runc).read_bytes()
        assert Path(carried.busybox).read_bytes() == b"bb"
        assert carried.nvidia == {"nvidia-ctk": str(work / "nvidia/nvidia-ctk")}
        assert Path(carried.nvidia["nvidia-ctk"]).read_bytes() == b"ctk"
        assert carried.cuda_source == str(bundle / "src/cuda_check.cu")  # read in place
        assert carried.wheels == str(bundle / "wheels")
        # unpacked by its own row, which can fail alone
        assert carried.runtime == str(bundle / "runtime/node-runtime.tar.xz")
    finally:
        if carried.seccomp_link:
            os.unlink(carried.seccomp_link)


def test_a_static_runc_needs_no_link(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "bin").mkdir(parents=True)
    for name in ("runc", "busybox", "cuda-probe"):
        (bundle / "bin" / name).write_bytes(b"static")
    files = {
        "runc": "bin/runc",
        "busybox": "bin/busybox",
        "probe": "bin/cuda-probe",
        "cuda_source": "x",
        "wheels": "w",
    }
    (bundle / MANIFEST).write_text(json.dumps({"files": files}))
    carried = prepare(str(bundle), str(tmp_path / "work"))
    assert carried.seccomp_link is None and carried.nvidia == {} and carried.runtime is None
    assert Path(carried.runc).read_bytes() == b"static"
