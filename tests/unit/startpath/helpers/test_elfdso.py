"""What ldconfig reads from a shared object: the same SONAMEs as a full ELF parser, and nothing at all
(never an exception) from files that are not shared objects or whose headers lie. readelf (binutils)
is the oracle."""

from __future__ import annotations

import os
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cdictk.elflinks import read_links, read_soname
from cdictk.startpath.helpers.elfdso import FLAG_X8664_LIB64, glibc_minor, read_dso

HOST_LIBS = Path("/usr/lib/x86_64-linux-gnu")


def _read(path: Path) -> tuple[int, bytes | None] | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        dso = read_dso(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return None if dso is None else (dso.flags, dso.soname)


def _abi_tag(path: Path) -> int | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        dso = read_dso(fd, os.fstat(fd).st_size, abi_tag=True)
    finally:
        os.close(fd)
    return None if dso is None else dso.osversion


def _glibc_minor(path: Path) -> int | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return glibc_minor(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _readelf_abi_tag(path: Path) -> int:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, check=False).stdout
    match = re.search(r"OS: Linux, ABI: (\d+)\.(\d+)\.(\d+)", out)
    return int(match[1]) << 16 | int(match[2]) << 8 | int(match[3]) if match else 0


def _readelf_soname(path: Path) -> str | None:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=False).stdout
    match = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", out)
    return match.group(1) if match else None


def test_sonames_agree_with_readelf_on_the_hosts_libraries() -> None:
    if not HOST_LIBS.is_dir() or shutil.which("readelf") is None:
        pytest.skip(f"no {HOST_LIBS} or no readelf (binutils, which gcc brings) on this host")
    checked = 0
    for path in sorted(HOST_LIBS.glob("*.so*"))[:200]:
        if path.is_symlink() or not path.is_file():
            continue
        expected = _readelf_soname(path)
        assert read_soname(str(path)) == expected, path
        found = _read(path)
        assert (found[1].decode() if found and found[1] else None) == expected, path
        if found is not None:
            assert found[0] == 0x0303  # libc6, x86-64
        checked += 1
    assert checked > 10


def test_abi_tags_agree_with_readelf_on_the_hosts_libraries() -> None:
    if not HOST_LIBS.is_dir() or shutil.which("readelf") is None:
        pytest.skip(f"no {HOST_LIBS} or no readelf (binutils, which gcc brings) on this host")
    tagged = 0
    for path in sorted(HOST_LIBS.glob("*.so*"))[:200]:
        if path.is_symlink() or not path.is_file() or _read(path) is None:
            continue
        expected = _readelf_abi_tag(path)
        assert _abi_tag(path) == expected, path
        tagged += expected != 0
    assert tagged > 0  # glibc's own libraries carry one


def test_the_glibc_release_is_the_newest_version_libc_defines() -> None:
    version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    libc = HOST_LIBS / "libc.so.6"
    if not version.startswith("glibc 2.") or not libc.exists():
        pytest.skip("needs an x86-64 glibc host")
    minor = int(version.split(".")[1])
    assert _glibc_minor(libc.resolve()) in ({minor, minor - 1} if minor in (37, 40) else {minor})
    libz = next(HOST_LIBS.glob("libz.so.1"), None)
    if libz is not None:
        assert _glibc_minor(libz.resolve()) is None  # it needs glibc's versions, defines none


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
        _abi_tag(target)
        _glibc_minor(target)
        read_soname(str(target))
    for _ in range(200):
        mangled = bytearray(data[:8192])
        for _ in range(20):
            mangled[rng.randrange(16, len(mangled))] = rng.randrange(256)
        target.write_bytes(bytes(mangled))
        _read(target)
        _abi_tag(target)
        _glibc_minor(target)
        read_soname(str(target))
        read_links(str(target))


def _readelf_links(path: Path) -> tuple[list[str], str | None, str | None]:
    """(NEEDED in order, RUNPATH, RPATH) as readelf shows them."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=False).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out)
    runpath = re.search(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", out)
    rpath = re.search(r"\(RPATH\)\s+Library rpath: \[(.*)\]", out)
    return needed, runpath[1] if runpath else None, rpath[1] if rpath else None


def test_links_agree_with_readelf_on_the_hosts_programs_and_libraries() -> None:
    if not HOST_LIBS.is_dir() or shutil.which("readelf") is None:
        pytest.skip(f"no {HOST_LIBS} or no readelf (binutils, which gcc brings) on this host")
    checked = 0
    candidates = [Path("/usr/bin/python3.11"), Path("/bin/ls"), *sorted(HOST_LIBS.glob("*.so*"))[:150]]
    for path in candidates:
        if path.is_symlink() or not path.is_file() or path.read_bytes()[:4] != b"\x7fELF":
            continue  # a link, or a linker script such as libc.so
        links = read_links(str(path))
        assert links is not None, path
        needed, runpath, rpath = _readelf_links(path)
        assert [name.decode() for name in links.needed] == needed, path
        assert (links.runpath and links.runpath.decode(), links.rpath and links.rpath.decode()) == (
            runpath,
            rpath,
        )
        assert links.arch == FLAG_X8664_LIB64
        checked += 1
    assert checked > 10
    interpreter = read_links("/bin/ls")
    assert interpreter is not None and interpreter.interpreter == b"/lib64/ld-linux-x86-64.so.2"


def test_links_of_a_static_program_a_run_path_and_no_elf(stubs: Path, tmp_path: Path) -> None:
    source = tmp_path / "main.c"
    source.write_text("int main(void) { return 0; }\n")
    static = tmp_path / "static"
    built = subprocess.run(["gcc", "-static", "-o", static, source], capture_output=True, check=False)
    if built.returncode == 0:
        links = read_links(str(static))
        assert links is not None and links.needed == () and links.interpreter is None
    relative = tmp_path / "relative.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-rpath,$ORIGIN/../libs", "-Wl,--enable-new-dtags", "-Wl,--no-as-needed",
         "-o", relative,
         stubs / "with.so"],
        check=True,
    )  # fmt: skip
    links = read_links(str(relative))
    assert links is not None and links.runpath == b"$ORIGIN/../libs" and links.interpreter is None
    assert b"libstub.so.7" in links.needed
    (tmp_path / "text").write_text("#!/bin/sh\n")
    for name in ("text", "missing"):
        assert read_links(str(tmp_path / name)) is None


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


def test_read_soname_of_a_library_with_and_without_one(stubs: Path) -> None:
    assert read_soname(str(stubs / "with.so")) == "libstub.so.7"
    assert read_soname(str(stubs / "without.so")) is None


def test_read_soname_of_what_is_no_readable_library(stubs: Path, tmp_path: Path) -> None:
    (tmp_path / "text").write_text("not an ELF file at all\n")
    (tmp_path / "head").write_bytes((stubs / "with.so").read_bytes()[:80])
    (tmp_path / "empty").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo.so")  # never opened for a read that could block
    for name in ("text", "head", "empty", "missing", "fifo.so"):
        assert read_soname(str(tmp_path / name)) is None
    assert read_soname(str(tmp_path)) is None  # a directory
    assert read_soname(str(stubs / "with.so"), max_size=100) is None  # over the size cap


# An ABI note in a section of its own, after another note in the same PT_NOTE segment (as glibc's
# libraries have a build-id first). {0}: the OS; {1}, {2}, {3}: the kernel version.
NOTES_C = """
__asm__(".pushsection .note.gnu.build-id.x,\\"a\\",@note\\n.balign 4\\n"
        ".long 4\\n.long 8\\n.long 3\\n.asciz \\"GNU\\"\\n.long 1\\n.long 2\\n.popsection\\n"
        ".pushsection .note.ABI-tag,\\"a\\",@note\\n.balign 4\\n"
        ".long 4\\n.long 16\\n.long 1\\n.asciz \\"GNU\\"\\n.long {0}\\n.long {1}\\n.long {2}\\n.long {3}\\n"
        ".popsection\\n");
int tagged(void) {{ return 0; }}
"""


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ((0, 4, 19, 300), 0x0004132C),  # 300 = 0x12c: ldconfig keeps each word's low byte
        ((0, 99, 0, 0), 0x00630000),
        ((1, 0, 5, 0), 0x01000500),  # the Hurd: the OS in the top byte
        ((0, 0, 0, 0), 0),  # 0.0.0: no tag (another segment's note may give one)
    ],
)
def test_an_abi_note_after_another_note_is_read_as_ldconfig_reads_it(
    tmp_path: Path, tag: tuple[int, int, int, int], expected: int
) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    source = tmp_path / "tagged.c"
    source.write_text(NOTES_C.format(*tag))
    out = tmp_path / "libtagged.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", out, source], check=True)
    assert _abi_tag(out) == expected
    if shutil.which("readelf") is not None and tag[0] == 0 and max(tag) < 256:
        assert _readelf_abi_tag(out) == expected


def tiny_library(order: str, soname: bytes, machine: int = 62, e_flags: int = 0) -> bytes:
    """An ELF64 shared object of the byte order ``order`` ("<" or ">"): one PT_LOAD mapping the whole
    file at address 0, a PT_DYNAMIC of DT_STRTAB, DT_SONAME and DT_NULL, and the string table."""
    ehsize, phentsize = 64, 56
    dynamic_at = ehsize + 2 * phentsize
    dynamic_size = 3 * 16
    strtab_at = dynamic_at + dynamic_size
    strtab = b"\0" + soname + b"\0"
    size = strtab_at + len(strtab)
    ident = b"\x7fELF" + bytes([2, 1 if order == "<" else 2, 1]) + bytes(9)
    header = ident + struct.pack(
        f"{order}HHIQQQIHHHHHH", 3, machine, 1, 0, ehsize, 0, e_flags, ehsize, phentsize, 2, 64, 0, 0
    )
    load = struct.pack(f"{order}IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)
    dynamic = struct.pack(
        f"{order}IIQQQQQQ", 2, 6, dynamic_at, dynamic_at, dynamic_at, dynamic_size, dynamic_size, 8
    )
    entries = struct.pack(f"{order}qQqQqQ", 5, strtab_at, 14, 1, 0, 0)
    return header + load + dynamic + entries + strtab


def test_fields_are_read_little_endian_and_big_endian_files_refused(tmp_path: Path) -> None:
    little, big = tmp_path / "little.so", tmp_path / "big.so"
    little.write_bytes(tiny_library("<", b"libtiny.so.1"))
    big.write_bytes(tiny_library(">", b"libtiny.so.1"))
    assert read_soname(str(little)) == "libtiny.so.1"
    assert _read(little) == (0x0303, b"libtiny.so.1")
    # EI_DATA says big-endian: not a library of any platform NVIDIA's driver runs on.
    assert read_soname(str(big)) is None
    assert _read(big) is None


@pytest.mark.parametrize(
    ("machine", "e_flags", "flags"),
    [
        (21, 0, 0x0503),  # ppc64le: FLAG_POWERPC_LIB64 | FLAG_ELF_LIBC6
        (243, 0x0005, 0x1003),  # riscv64 lp64d (double float ABI, RVC): FLAG_RISCV_FLOAT_ABI_DOUBLE
        (243, 0x0000, 0x0F03),  # riscv64 lp64 (soft float): FLAG_RISCV_FLOAT_ABI_SOFT
        (243, 0x0002, None),  # single-float ABI: ldconfig skips it
        (243, 0x0014, None),  # double float and TSO: a flag glibc does not support
        (2, 0, None),  # SPARC: a machine of no NVIDIA driver
    ],
)
def test_the_flags_ldconfig_stores_per_machine(
    tmp_path: Path, machine: int, e_flags: int, flags: int | None
) -> None:
    # glibc's sysdeps/generic/ldconfig.h values, set by sysdeps/unix/sysv/linux/{powerpc,riscv}/readelflib.c.
    path = tmp_path / "lib.so"
    path.write_bytes(tiny_library("<", b"libtiny.so.1", machine, e_flags))
    assert _read(path) == (None if flags is None else (flags, b"libtiny.so.1"))
