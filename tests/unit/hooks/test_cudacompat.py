"""enable-cuda-compat and its ELF note reader, on libraries built with gcc and on hostile rootfs trees."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.errors import HookError
from cdictk.hooks import cudacompat
from cdictk.hooks.cudacompat import COMPAT_CONF, compat_applies, enable_cuda_compat, parse_version
from cdictk.hooks.elfnote import ElfError, read_notes
from cdictk.rootfs import Rootfs
from tests import REPO

SECTION = ".note.cuda.fwd_compatibility"
OWNER = "NVIDIA Corporation"
NOTE_JSON = {"Format": 1, "CUDA Version": "12.8", "Driver": [535, 550, 570], "Device": []}
COMPAT = "usr/local/cuda/compat"
LIB = "libcuda.so.570.124.06"
SHT_NOTE, SHT_STRTAB, SHT_PROGBITS = 7, 3, 1


# Building real libraries


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


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Libs:
    if shutil.which("gcc") is None:
        print("gcc is not installed (tests/setup-host.sh installs it)")
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    return Libs(tmp_path_factory.mktemp("cudacompat-elf"))


def _notes_of(path: Path, limit: int = 64 << 10) -> list[tuple[str, int, bytes]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_notes(fd, SECTION, limit=limit)
    finally:
        os.close(fd)


def _notes_of_bytes(tmp_path: Path, data: bytes, name: str = "elf") -> list[tuple[str, int, bytes]]:
    path = tmp_path / name
    path.write_bytes(data)
    return _notes_of(path)


# Hand-made ELF files: either class, either byte order


def _synthetic_elf(
    sections: list[tuple[str, int, bytes, int]], *, wide: bool = True, big: bool = False
) -> bytes:
    """An ELF file with only a section table: ``(name, sh_type, content, sh_addralign)`` per section."""
    order = ">" if big else "<"
    header_size, shdr = (
        (64, struct.Struct(order + "IIQQQQIIQQ")) if wide else (52, struct.Struct(order + "10I"))
    )
    names = b"\0"
    name_offsets = []
    for name, *_ in [*sections, (".shstrtab", 0, b"", 1)]:
        name_offsets.append(len(names))
        names += name.encode() + b"\0"
    body = bytearray(header_size)
    placed = []
    for _, _, content, _ in sections:
        body += b"\0" * (-len(body) % 8)
        placed.append((len(body), len(content)))
        body += content
    placed.append((len(body), len(names)))
    body += names
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    body += shdr.pack(*[0] * 10)
    kinds = [(kind, align) for _, kind, _, align in sections] + [(SHT_STRTAB, 1)]
    for (offset, size), name_offset, (kind, align) in zip(placed, name_offsets, kinds, strict=True):
        body += shdr.pack(name_offset, kind, 0, 0, offset, size, 0, 0, align, 0)
    count = len(sections) + 2
    ident = b"\x7fELF" + bytes([2 if wide else 1, 2 if big else 1, 1]) + b"\0" * 9
    if wide:
        rest = struct.pack(order + "HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, count, count - 1)
    else:
        rest = struct.pack(order + "HHIIIIIHHHHHH", 3, 3, 1, 0, 0, shoff, 0, 52, 0, 0, 40, count, count - 1)
    body[:header_size] = ident + rest
    return bytes(body)


def _note(owner: bytes, note_type: int, desc: bytes, *, align: int = 4, big: bool = False) -> bytes:
    def pad(data: bytes, start: int) -> bytes:
        return data + b"\0" * (-(start + len(data)) % align)

    name = owner + b"\0"
    head = struct.pack(">III" if big else "<III", len(name), len(desc), note_type)
    named = head + pad(name, 12)
    return named + pad(desc, len(named))


class Elf64:
    """Field offsets of a little-endian ELF64 file, read independently of the code under test."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)
        (self.shoff,) = struct.unpack_from("<Q", data, 40)
        self.shnum, self.shstrndx = struct.unpack_from("<HH", data, 60)
        names_at = self.section(self.shstrndx)
        strtab_offset, strtab_size = struct.unpack_from("<QQ", data, names_at + 24)
        names = data[strtab_offset : strtab_offset + strtab_size]
        self.note_index = next(
            i
            for i in range(self.shnum)
            if names[struct.unpack_from("<I", data, self.section(i))[0] :].split(b"\0")[0] == SECTION.encode()
        )
        (self.note_offset,) = struct.unpack_from("<Q", data, self.section(self.note_index) + 24)

    def section(self, index: int) -> int:
        return int(self.shoff) + 64 * index

    def patch(self, offset: int, fmt: str, value: int) -> bytes:
        data = bytearray(self.data)
        struct.pack_into(fmt, data, offset, value)
        return bytes(data)


# read_notes on real and synthetic files


def test_reads_the_note_gcc_put_in_a_shared_library(libs: Libs) -> None:
    assert _notes_of(libs.note) == [(OWNER, 1, libs.desc)]
    assert _notes_of(libs.plain) == []
    assert _notes_of(libs.padded) == [(OWNER, 1, libs.desc + b"\0\0\0")]
    fd = os.open(libs.note, os.O_RDONLY)
    try:
        assert read_notes(fd, ".note.no-such-section") == []
        assert [owner for owner, _, _ in read_notes(fd, ".note.gnu.build-id")] == ["GNU"]
    finally:
        os.close(fd)


def test_binutils_agrees_the_section_is_a_note(libs: Libs) -> None:
    if shutil.which("readelf") is None:
        print("readelf is not installed: cross-check skipped")
        pytest.skip("readelf is not installed")
    sections = subprocess.run(
        ["readelf", "-W", "-S", str(libs.note)], capture_output=True, text=True, check=True
    )
    assert any(SECTION in line and " NOTE " in line for line in sections.stdout.splitlines())
    notes = subprocess.run(
        ["readelf", "-W", "-n", str(libs.note)], capture_output=True, text=True, check=True
    )
    assert OWNER in notes.stdout


def test_reads_a_32_bit_library(libs: Libs) -> None:
    if libs.m32 is None:
        print(f"gcc -m32 cannot build a library here: {libs.m32_why}")
        pytest.skip(f"gcc -m32 cannot build a library here: {libs.m32_why}")
    assert libs.m32.read_bytes()[4] == 1  # ELFCLASS32
    assert _notes_of(libs.m32) == [(OWNER, 1, libs.desc)]


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("big", [True, False])
def test_either_class_and_byte_order(tmp_path: Path, wide: bool, big: bool) -> None:
    notes = _note(b"NVIDIA Corporation", 1, b'{"a":1}', big=big) + _note(b"X", 7, b"", big=big)
    aligned8 = _note(b"GNU", 5, b"\x01\x02\x03\x04\x05", align=8, big=big)
    data = _synthetic_elf(
        [
            (".text", SHT_PROGBITS, b"\x90" * 5, 16),
            (SECTION, SHT_NOTE, notes, 4),
            (".note.gnu.property", SHT_NOTE, aligned8, 8),
        ],
        wide=wide,
        big=big,
    )
    path = tmp_path / "synthetic"
    path.write_bytes(data)
    assert _notes_of(path) == [(OWNER, 1, b'{"a":1}'), ("X", 7, b"")]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_notes(fd, ".note.gnu.property") == [("GNU", 5, b"\x01\x02\x03\x04\x05")]
    finally:
        os.close(fd)


def test_a_last_note_without_trailing_padding_and_zero_fill_are_accepted(tmp_path: Path) -> None:
    unpadded = _note(b"NVIDIA Corporation", 1, b"abcde")[:-3]
    assert _notes_of_bytes(tmp_path, _synthetic_elf([(SECTION, SHT_NOTE, unpadded, 4)])) == [
        (OWNER, 1, b"abcde")
    ]
    zero_filled = _note(b"A", 1, b"") + b"\0" * 8
    assert _notes_of_bytes(tmp_path, _synthetic_elf([(SECTION, SHT_NOTE, zero_filled, 4)])) == [("A", 1, b"")]


@pytest.mark.parametrize(
    ("content", "kind", "message"),
    [
        (_note(b"A", 1, b"") + b"\x01\x02", SHT_NOTE, "stray bytes"),
        (b"\x05\0\0\0\xff\xff\xff\xff\x01\0\0\0" + b"A" * 8, SHT_NOTE, "past the section's end"),
        (b"\xff\xff\xff\xff\0\0\0\0\x01\0\0\0" + b"A" * 8, SHT_NOTE, "past the section's end"),
        (_note(b"A", 1, b""), SHT_PROGBITS, "not a note section"),
    ],
)
def test_damaged_note_sections(tmp_path: Path, content: bytes, kind: int, message: str) -> None:
    with pytest.raises(ElfError, match=message):
        _notes_of_bytes(tmp_path, _synthetic_elf([(SECTION, kind, content, 4)]))


def test_not_elf_empty_and_truncated(libs: Libs, tmp_path: Path) -> None:
    data = libs.note.read_bytes()
    elf = Elf64(data)
    cuts = [0, 3, 10, 16, 40, 63, elf.note_offset + 8, elf.shoff + 10, len(data) - 1]
    for cut in cuts:
        with pytest.raises(ElfError):
            _notes_of_bytes(tmp_path, data[:cut], f"cut{cut}")
    with pytest.raises(ElfError, match="not an ELF file"):
        _notes_of_bytes(tmp_path, b"INPUT(libcuda.so.1)\n", "script")
    with pytest.raises(ElfError, match="class"):
        _notes_of_bytes(tmp_path, b"\x7fELF\x03\x01\x01" + b"\0" * 60, "class")


def test_hand_corrupted_headers(libs: Libs, tmp_path: Path) -> None:
    elf = Elf64(libs.note.read_bytes())
    size = len(elf.data)
    note_header = elf.section(elf.note_index)
    cases = {
        "offset past EOF": (elf.patch(note_header + 24, "<Q", size + 100), "past the end of the file"),
        "offset wraps": (elf.patch(note_header + 24, "<Q", 2**64 - 8), "past the end of the file"),
        "size past EOF": (elf.patch(note_header + 32, "<Q", size), "past the end of the file"),
        "huge shnum": (elf.patch(60, "<H", 0xFEFF), "more than 4096"),
        "table past EOF": (elf.patch(60, "<H", 4000), "past the end of the file"),
        "shoff past EOF": (elf.patch(40, "<Q", 2**63), "past the end of the file"),
        "shentsize": (elf.patch(58, "<H", 32), "section header size"),
        "shstrndx out of range": (elf.patch(62, "<H", elf.shnum + 3), "out of range"),
        "shstrndx reserved": (elf.patch(62, "<H", 0xFF10), "reserved"),
        "name index": (elf.patch(note_header, "<I", 0xFFFFFF), "outside the name table"),
        "strtab not a strtab": (
            elf.patch(elf.section(elf.shstrndx) + 4, "<I", SHT_NOTE),
            "not a string table",
        ),
        "strtab huge": (elf.patch(elf.section(elf.shstrndx) + 32, "<Q", 1 << 30), "more than 1048576"),
        "namesz": (elf.patch(elf.note_offset, "<I", 0xFFFFFFFF), "past the section's end"),
        "descsz": (elf.patch(elf.note_offset + 4, "<I", 0xFFFFFFF0), "past the section's end"),
        "descsz by one": (
            elf.patch(elf.note_offset + 4, "<I", len(libs.desc) + 40),
            "past the section's end",
        ),
    }
    for name, (data, message) in cases.items():
        with pytest.raises(ElfError, match=message):
            _notes_of_bytes(tmp_path, data, name.replace(" ", "-"))


def test_extended_section_numbering(tmp_path: Path) -> None:
    data = bytearray(_synthetic_elf([(SECTION, SHT_NOTE, _note(b"NVIDIA Corporation", 1, b"{}"), 4)]))
    (shoff,) = struct.unpack_from("<Q", data, 40)
    count, strndx = struct.unpack_from("<HH", data, 60)
    struct.pack_into("<HH", data, 60, 0, 0xFFFF)  # both moved into section header 0
    struct.pack_into("<Q", data, shoff + 32, count)
    struct.pack_into("<I", data, shoff + 40, strndx)
    assert _notes_of_bytes(tmp_path, bytes(data)) == [(OWNER, 1, b"{}")]
    struct.pack_into("<Q", data, shoff + 32, 70000)
    with pytest.raises(ElfError, match="more than 4096"):
        _notes_of_bytes(tmp_path, bytes(data))


def test_no_section_table_means_no_note(tmp_path: Path) -> None:
    data = bytearray(_synthetic_elf([]))
    struct.pack_into("<Q", data, 40, 0)
    assert _notes_of_bytes(tmp_path, bytes(data)) == []


def test_a_section_over_the_limit_is_refused_without_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sparse 2 GiB file whose note section claims 1 GiB: nothing near that size may be read.
    content = _note(b"NVIDIA Corporation", 1, b"{}")
    data = bytearray(_synthetic_elf([(SECTION, SHT_NOTE, content, 4)]))
    (shoff,) = struct.unpack_from("<Q", data, 40)
    struct.pack_into("<Q", data, shoff + 64 + 32, 1 << 30)
    path = tmp_path / "sparse"
    path.write_bytes(bytes(data))
    os.truncate(path, 2 << 30)
    reads: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, length: int, offset: int) -> bytes:
        reads.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    with pytest.raises(ElfError, match="more than 65536"):
        _notes_of(path)
    assert sum(reads) < 4096
    with pytest.raises(ElfError, match="more than 4096"):
        _notes_of(path, limit=4096)


def test_random_damage_only_ever_raises_elf_error(libs: Libs, tmp_path: Path) -> None:
    original = libs.note.read_bytes()
    elf = Elf64(original)
    # The headers, the section table and the note: where a parser can be led astray.
    spots = [*range(0, 64), *range(elf.shoff, len(original)), *range(elf.note_offset, elf.note_offset + 40)]
    chooser = random.Random(1234)  # noqa: S311 - reproducible damage, not secrets
    path = tmp_path / "fuzz"
    for round_ in range(400):
        data = bytearray(original)
        for _ in range(1 + round_ % 4):
            data[chooser.choice(spots)] = chooser.randrange(256)
        path.write_bytes(bytes(data))
        try:
            result = _notes_of(path)
        except ElfError:
            continue
        assert isinstance(result, list)


def test_refuses_a_descriptor_that_is_not_a_regular_file(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ElfError, match="not a regular file"):
            read_notes(fd, SECTION)
    finally:
        os.close(fd)


# Versions and the decision table


def test_parse_version() -> None:
    assert parse_version("570.124.06") == (570, 124, 6)
    assert parse_version("12.8") == (12, 8)
    assert parse_version("570") == (570,)
    assert parse_version("570", min_parts=2) is None
    # "\u00b2" (superscript two) and Arabic-Indic digits pass str.isdigit(); the first one fails int().
    bad_versions = ("", ".", "570.", ".1", "570..1", "570.1a", "57 0", "-1.2", "+1.2", "1_0.2", "\u00b2.1")
    for bad in (*bad_versions, "\u0665\u0667\u0660.1", "1" * 10, "1." * 8 + "1", "1" * 65):
        assert parse_version(bad) is None, bad
    assert parse_version("1.2.3.4.5.6.7.8") == (1, 2, 3, 4, 5, 6, 7, 8)


DRIVERS_535_570 = ((535, 550, 570), (12, 8))


@pytest.mark.parametrize(
    ("compat", "note", "driver", "cuda", "expected"),
    [
        # With a note and a host driver: major listed and the compat library newer.
        ((570, 124, 6), DRIVERS_535_570, (550, 54, 15), None, True),
        ((570, 124, 6), DRIVERS_535_570, (535, 230, 2), None, True),
        ((570, 124, 6), DRIVERS_535_570, (545, 23, 8), None, False),  # 545 not listed
        ((570, 124, 6), DRIVERS_535_570, (570, 124, 6), None, False),  # same version
        ((570, 124, 6), DRIVERS_535_570, (570, 133, 20), None, False),  # host newer
        ((570, 124, 6), DRIVERS_535_570, (570, 86, 10), None, True),  # same major, compat newer
        ((570, 124, 6), DRIVERS_535_570, (575, 51, 3), None, False),
        ((570, 124, 6), DRIVERS_535_570, (550, 54, 15), (12, 4), True),  # the driver rule wins
        # With a note and only a host CUDA version.
        ((570, 124, 6), DRIVERS_535_570, None, (12, 4), True),
        ((570, 124, 6), DRIVERS_535_570, None, (12, 8), False),
        ((570, 124, 6), DRIVERS_535_570, None, (12, 9), False),
        ((570, 124, 6), DRIVERS_535_570, None, (12, 8, 1), False),
        ((570, 124, 6), DRIVERS_535_570, None, (11,), True),
        # Without a note: majors only.
        ((570, 124, 6), None, (550, 54, 15), None, True),
        ((570, 124, 6), None, (570, 10), None, False),
        ((570, 124, 6), None, (575, 51, 3), None, False),
        ((570, 124, 6), None, None, (12, 4), False),  # nothing to compare a CUDA version with
        ((570, 124, 6), None, (550, 54, 15), (12, 4), True),
    ],
)
def test_decision_table(
    compat: tuple[int, ...],
    note: tuple[tuple[int, ...], tuple[int, ...]] | None,
    driver: tuple[int, ...] | None,
    cuda: tuple[int, ...] | None,
    expected: bool,
) -> None:
    assert compat_applies(compat, note, driver, cuda) is expected


# The hook on rootfs trees


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def use_openat2(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def _rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    (root / COMPAT).mkdir(parents=True)
    (root / "etc").mkdir()
    return root


def _run(root: Path, driver: str | None, cuda: str | None = None, *, openat2: bool = True, **kw: str) -> bool:
    with Rootfs(str(root), use_openat2=openat2) as rootfs:
        return enable_cuda_compat(rootfs, driver, cuda, **kw)


def _conf(root: Path) -> Path:
    return root / COMPAT_CONF.lstrip("/")


def _install(root: Path, lib: Path, name: str = LIB, where: str = COMPAT) -> None:
    shutil.copyfile(lib, root / where / name)
    (root / where / "libcuda.so.1").symlink_to(name)


class Blocked(Exception):
    """Not an OSError: the code under test must not be able to swallow it."""


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Turn a blocking open (of a FIFO, say) into a failure instead of a stuck test run."""

    def expire(signum: int, frame: object) -> None:
        raise Blocked("enable_cuda_compat blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_nothing_happens_without_host_versions(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    assert _run(root, None) is False
    assert _run(root, "", "") is False
    assert not (root / "etc/ld.so.conf.d").exists()


def test_writes_the_conf_once_and_a_second_run_changes_nothing(
    libs: Libs, tmp_path: Path, use_openat2: bool
) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    umask = os.umask(0o077)  # the mode must not depend on the umask
    try:
        assert _run(root, "550.54.15", openat2=use_openat2) is True
    finally:
        os.umask(umask)
    conf = _conf(root)
    assert conf.read_text() == "/usr/local/cuda/compat\n"
    first = conf.stat()
    assert stat.S_IMODE(first.st_mode) == 0o644
    assert _run(root, "550.54.15", openat2=use_openat2) is True
    second = conf.stat()
    assert (second.st_ino, second.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    assert sorted(os.listdir(conf.parent)) == [conf.name]  # no temporary files left behind


def test_the_note_decides_when_there_is_one(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.old_drivers)  # the note lists only 535: a 550 host may not use it
    assert _run(root, "550.54.15") is False
    assert not _conf(root).exists()
    assert _run(root, "535.230.02") is True


def test_host_cuda_version_only(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    assert _run(root, None, "12.4") is True
    assert _run(root, None, "12.8") is False
    assert not _conf(root).exists()  # removed again: it no longer applies
    plain = _rootfs(tmp_path / "plain")
    _install(plain, libs.plain)
    assert _run(plain, None, "12.4") is False


@pytest.mark.parametrize("lib", ["plain", "bad_json", "other_owner", "padded", "script"])
def test_without_a_usable_note_the_majors_decide(libs: Libs, tmp_path: Path, lib: str) -> None:
    root = _rootfs(tmp_path)
    if lib == "script":
        (root / COMPAT / LIB).write_text("INPUT(libcuda.so.1)\n")  # not ELF at all
    else:
        _install(root, getattr(libs, lib))
    # The padded note is usable: it must decide like the normal one (545 is not listed).
    assert _run(root, "545.23.08") is (lib != "padded")
    assert _run(root, "575.51.03") is False
    assert _run(root, "550.54.15") is True


def test_a_stale_conf_goes_when_the_host_driver_caught_up(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    assert _run(root, "550.54.15") is True
    assert _conf(root).exists()
    assert _run(root, "575.51.03") is False
    assert not _conf(root).exists()
    assert _run(root, "575.51.03") is False  # and nothing to remove is no error


def test_only_one_regular_file_counts(libs: Libs, tmp_path: Path, no_hang: None) -> None:
    root = _rootfs(tmp_path)
    compat = root / COMPAT
    _install(root, libs.note)
    os.mkfifo(compat / "libcuda.so.999.1")  # opening it for reading would block
    (compat / "libcuda.so.998.1").mkdir()
    (compat / "libcuda.so.997.1.1").symlink_to(LIB)
    for name in (
        "libcuda.so.996",
        "libcuda.so.996.1.bak",
        "libcuda.so.\uff19\uff19\uff16.1",
        "libcuda.so.996.-1",
        "xlibcuda.so.996.1",
    ):
        shutil.copyfile(libs.note, compat / name)
    if os.geteuid() == 0:
        os.mknod(compat / "libcuda.so.995.1", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        print("not root: the device-node case is left out")
    assert _run(root, "550.54.15") is True


def test_two_candidates_mean_no_compat(libs: Libs, tmp_path: Path) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    shutil.copyfile(libs.note, root / COMPAT / "libcuda.so.575.51.03")
    assert _run(root, "550.54.15") is False
    assert not _conf(root).exists()


def test_a_fifo_alone_neither_hangs_nor_counts(tmp_path: Path, no_hang: None) -> None:
    root = _rootfs(tmp_path)
    os.mkfifo(root / COMPAT / "libcuda.so.999.1")
    assert _run(root, "550.54.15") is False


def test_no_compat_directory(tmp_path: Path, use_openat2: bool) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    assert _run(root, "550.54.15", openat2=use_openat2) is False
    (root / "usr/local").mkdir(parents=True)
    (root / "usr/local/cuda").write_text("a file, not a directory")
    assert _run(root, "550.54.15", openat2=use_openat2) is False
    (root / "usr/local/cuda").unlink()
    (root / "usr/local/cuda").symlink_to("cuda")  # a loop
    assert _run(root, "550.54.15", openat2=use_openat2) is False


def test_a_symlink_to_a_host_library_does_not_count(libs: Libs, tmp_path: Path, use_openat2: bool) -> None:
    host_lib = tmp_path / "host" / LIB
    host_lib.parent.mkdir()
    shutil.copyfile(libs.note, host_lib)
    root = _rootfs(tmp_path)
    (root / COMPAT / LIB).symlink_to(host_lib)
    assert _run(root, "550.54.15", openat2=use_openat2) is False
    shutil.copyfile(libs.note, root / COMPAT / "libcuda.so.570.1")  # the link still does not count
    assert _run(root, "550.54.15", openat2=use_openat2) is True


def test_directory_links_resolve_inside_the_rootfs(libs: Libs, tmp_path: Path, use_openat2: bool) -> None:
    host_cuda = tmp_path / "host-cuda"
    (host_cuda / "compat").mkdir(parents=True)
    shutil.copyfile(libs.note, host_cuda / "compat" / LIB)
    root = tmp_path / "rootfs"
    (root / "usr/local").mkdir(parents=True)
    cuda = root / "usr/local/cuda"
    for target in (str(host_cuda), "../../../../../../../../../../.." + str(host_cuda)):
        cuda.symlink_to(target)
        assert _run(root, "550.54.15", openat2=use_openat2) is False, target
        cuda.unlink()
    # "/usr/local/cuda -> /" means the rootfs's own /compat.
    cuda.symlink_to("/")
    (root / "compat").mkdir()
    _install(root, libs.note, where="compat")
    assert _run(root, "550.54.15", openat2=use_openat2) is True
    assert _conf(root).read_text() == "/usr/local/cuda/compat\n"


def test_the_conf_stays_inside_the_rootfs(libs: Libs, tmp_path: Path, use_openat2: bool) -> None:
    host_dir = tmp_path / "host-ld.so.conf.d"
    host_dir.mkdir()
    (host_dir / "host.conf").write_text("/host\n")
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    (root / "etc/ld.so.conf.d").symlink_to(host_dir)
    # The link's target is made inside the rootfs and receives the file; the host dir never does.
    assert _run(root, "550.54.15", openat2=use_openat2) is True
    inside = root / str(host_dir).lstrip("/")
    assert (inside / Path(COMPAT_CONF).name).read_text() == "/usr/local/cuda/compat\n"
    assert os.listdir(host_dir) == ["host.conf"]
    # A stale conf to remove is looked for inside the rootfs too.
    (host_dir / Path(COMPAT_CONF).name).write_text("host file\n")
    assert _run(root, "575.51.03", openat2=use_openat2) is False
    assert not (inside / Path(COMPAT_CONF).name).exists()
    assert (host_dir / Path(COMPAT_CONF).name).read_text() == "host file\n"


def test_a_planted_conf_symlink_is_replaced_not_followed(libs: Libs, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host data\n")
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    (root / "etc/ld.so.conf.d").mkdir()
    _conf(root).symlink_to(victim)
    assert _run(root, "550.54.15") is True
    assert not _conf(root).is_symlink()
    assert victim.read_text() == "host data\n"


def test_custom_compat_root(libs: Libs, tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "opt/compat").mkdir(parents=True)
    _install(root, libs.note, where="opt/compat")
    assert _run(root, "550.54.15", compat_root="//opt//compat/") is True
    assert _conf(root).read_text() == "/opt/compat\n"


@pytest.mark.parametrize(
    ("driver", "cuda", "root", "message"),
    [
        ("550.54.15x", None, "/usr/local/cuda/compat", "--host-driver-version"),
        ("550.54.15\n", None, "/usr/local/cuda/compat", "--host-driver-version"),
        (None, "twelve", "/usr/local/cuda/compat", "--host-cuda-version"),
        ("550.54.15", None, "relative/compat", "--cuda-compat-container-root"),
        ("550.54.15", None, "/a\n/etc", "--cuda-compat-container-root"),
        ("550.54.15", None, "/a b", "--cuda-compat-container-root"),
        ("550.54.15", None, "/a#b", "--cuda-compat-container-root"),
    ],
)
def test_bad_arguments(tmp_path: Path, driver: str | None, cuda: str | None, root: str, message: str) -> None:
    rootfs = _rootfs(tmp_path)
    with pytest.raises(HookError, match=message) as caught:
        _run(rootfs, driver, cuda, compat_root=root)
    assert "\n" not in str(caught.value).replace("\\n", "")


def test_import_cost() -> None:
    forbidden = ("typing", "dataclasses", "re", "json", "subprocess", "enum", "argparse")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import cdictk.hooks.cudacompat\n"
        f"print(','.join(m for m in {forbidden!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
    assert cudacompat.COMPAT_CONF.startswith("/etc/ld.so.conf.d/00-")


def test_a_failed_reopen_is_an_error_not_a_silent_no(
    libs: Libs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _rootfs(tmp_path)
    _install(root, libs.note)
    real_open = os.open

    def no_proc(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if str(path).startswith("/proc/self/fd/"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", no_proc)
    with pytest.raises(HookError, match=f"cannot open {LIB} in the container: Permission denied"):
        _run(root, "550.54.15", openat2=False)
