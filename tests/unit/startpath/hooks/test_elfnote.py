"""The ELF note reader the CUDA compat hook uses: libraries built with gcc, hand-made files of either
class and byte order, damaged and hostile headers."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cdictk.startpath.hooks.elfnote import ElfError, read_notes
from tests.unit.startpath.hooks.cudalibs import OWNER, SECTION, Libs, build_libs

SHT_NOTE, SHT_STRTAB, SHT_PROGBITS = 7, 3, 1


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Libs:
    return build_libs(tmp_path_factory)


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
