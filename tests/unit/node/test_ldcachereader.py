import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.node.ldcachereader import CacheEntry, LdCacheError, parse_ld_cache, read_ld_cache

LIBDIR = "/usr/lib/x86_64-linux-gnu"
X86_64_LIBC6 = 0x0303
I386_LIBC6 = 0x0003
X32_LIBC6 = 0x0803
_NATIVE = "<" if sys.byteorder == "little" else ">"

# (real file, soname, dev link) of the stub libraries ldconfig indexes.
STUBS = [
    ("libfoo.so.1.2.3", "libfoo.so.1", "libfoo.so"),
    ("libbar.so.2.0.0", "libbar.so.2", "libbar.so"),
    ("libnvidia-stub.so.550.54.15", "libnvidia-stub.so.550.54.15", "libnvidia-stub.so.1"),
]

Entry = tuple[int, str, str]  # flags, name, path


def new_cache(
    entries: list[Entry], order: str = "<", endian: int = 2, hwcaps: list[int] | None = None
) -> bytes:
    """A new-format cache: header, entries, string table (offsets from the header's start)."""
    table_end = 48 + 24 * len(entries)
    strings = bytearray()
    offsets: dict[str, int] = {}

    def offset(text: str) -> int:
        if text not in offsets:
            offsets[text] = table_end + len(strings)
            strings.extend(text.encode("utf-8", "surrogateescape") + b"\0")
        return offsets[text]

    hwcap = hwcaps or [0] * len(entries)
    records = b"".join(
        struct.pack(order + "iIIIQ", flags, offset(name), offset(path), 0, hwcap[i])
        for i, (flags, name, path) in enumerate(entries)
    )
    header = b"glibc-ld.so.cache1.1" + struct.pack(order + "IIB3xI12x", len(entries), len(strings), endian, 0)
    return header + records + bytes(strings)


def old_cache(entries: list[Entry], embed_new: bool = True, align: int = 8, order: str = _NATIVE) -> bytes:
    """An old-format cache; with ``embed_new`` ldconfig's compat layout (the new cache in its string table)."""
    old_end = 16 + 12 * len(entries)
    if embed_new:
        new_start = (old_end + align - 1) & ~(align - 1)
        new = new_cache(entries, order=order)
        new_strings = 48 + 24 * len(entries)  # the new string table's offset from the new header
        # Old offsets count from old_end; the strings are the new cache's, so shift them.
        table, base = new, new_start - old_end
        locate = {
            text: new.index(text.encode() + b"\0", new_strings) for _, n, p in entries for text in (n, p)
        }
        pad = bytes(new_start - old_end)
    else:
        table, base, pad = b"", 0, b""
        strings = bytearray()
        locate = {}
        for _, name, path in entries:
            for text in (name, path):
                if text not in locate:
                    locate[text] = len(strings)
                    strings.extend(text.encode() + b"\0")
        table = bytes(strings)
    records = b"".join(
        struct.pack(order + "iII", flags, base + locate[name], base + locate[path])
        for flags, name, path in entries
    )
    return b"ld.so-1.7.0\0" + struct.pack(order + "I", len(entries)) + records + pad + table


SAMPLE: list[Entry] = [
    (X86_64_LIBC6, "libcuda.so.1", f"{LIBDIR}/libcuda.so.1"),
    (I386_LIBC6, "libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1"),
    (X32_LIBC6, "libc.so.6", "/libx32/libc.so.6"),
    (0x0002, "libold.so.5", "/lib/libold.so.5"),  # libc5: dropped
    (0x0A03, "libnvidia-ml.so.1", "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1"),
]
EXPECTED = [
    CacheEntry("libcuda.so.1", f"{LIBDIR}/libcuda.so.1", X86_64_LIBC6, 64),
    CacheEntry("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", I386_LIBC6, 32),
    CacheEntry("libc.so.6", "/libx32/libc.so.6", X32_LIBC6, 32),
    CacheEntry("libnvidia-ml.so.1", "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1", 0x0A03, 64),
]


def _ldconfig() -> str | None:
    found = shutil.which("ldconfig")
    for candidate in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if found is None and os.access(candidate, os.X_OK):
            found = candidate
    return found


@pytest.fixture(scope="module")
def ldconfig_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny root with stub libraries, indexed by the real glibc ldconfig."""
    gcc, ldconfig = shutil.which("gcc"), _ldconfig()
    if gcc is None or ldconfig is None:
        pytest.skip(f"needs gcc and ldconfig to build a real cache (gcc: {gcc}, ldconfig: {ldconfig})")
    root = tmp_path_factory.mktemp("root")
    libdir = root / LIBDIR.lstrip("/")
    libdir.mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "var/cache/ldconfig").mkdir(parents=True)
    source = root / "stub.c"
    source.write_text("int stub(void) { return 42; }\n")
    for real, soname, dev in STUBS:
        subprocess.run(
            [gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(libdir / real), str(source)],
            check=True,
        )
        if soname != real:
            (libdir / soname).symlink_to(real)
        (libdir / dev).symlink_to(soname)
    (root / "etc/ld.so.conf").write_text(f"{LIBDIR}\n")
    subprocess.run([ldconfig, "-r", str(root)], check=True, capture_output=True)
    return root


def test_cache_built_by_real_ldconfig(ldconfig_root: Path) -> None:
    entries = read_ld_cache(str(ldconfig_root / "etc/ld.so.cache"))
    ours = {entry.name: entry for entry in entries if entry.path.startswith(LIBDIR + "/")}
    assert {soname for _, soname, _ in STUBS} <= set(ours)  # ldconfig also indexes some dev links
    for _, soname, _ in STUBS:
        entry = ours[soname]
        assert entry.path == f"{LIBDIR}/{soname}"  # as stored: no root prefix
        assert entry.flags & 0xFF == 3
        assert entry.bits == 64
    assert all(entry.bits == 64 for entry in entries)


def _ldconfig_print(cache: Path) -> list[tuple[str, str]]:
    """(name, path) of every line of ``ldconfig -p -C cache``: glibc's own reader, to compare with."""
    ldconfig = _ldconfig()
    assert ldconfig is not None
    out = subprocess.run([ldconfig, "-p", "-C", str(cache)], check=True, capture_output=True).stdout
    lines = [line for line in out.decode("utf-8", "surrogateescape").splitlines() if line.startswith("\t")]
    return [(line[1 : line.index(" (")], line.split(" => ", 1)[1]) for line in lines]


def test_same_entries_as_ldconfig_prints(ldconfig_root: Path) -> None:
    for cache in (ldconfig_root / "etc/ld.so.cache", Path("/etc/ld.so.cache")):
        if cache.exists():
            parsed = [(entry.name, entry.path) for entry in read_ld_cache(str(cache))]
            assert parsed == _ldconfig_print(cache)


def test_new_format_alone() -> None:
    assert parse_ld_cache(new_cache(SAMPLE)) == EXPECTED


def test_big_endian_new_format_is_read_in_its_declared_order() -> None:
    assert parse_ld_cache(new_cache(SAMPLE, order=">", endian=3)) == EXPECTED


def test_unset_endianness_means_host_order() -> None:
    assert parse_ld_cache(new_cache(SAMPLE, order=_NATIVE, endian=0)) == EXPECTED


@pytest.mark.parametrize("align", [8, 4])
def test_old_format_with_embedded_new_format(align: int) -> None:
    data = old_cache(SAMPLE[:3], align=align)  # three entries: 16 + 36 bytes, so the two alignments differ
    assert parse_ld_cache(data) == EXPECTED[:3]


def test_combined_format_uses_the_new_part() -> None:
    # An old part that disagrees with the new one: only the new part may be read.
    data = bytearray(old_cache(SAMPLE[:2]))
    struct.pack_into(_NATIVE + "i", data, 16, 0x0002)  # old entry 0 turned into a libc5 one
    assert parse_ld_cache(bytes(data)) == EXPECTED[:2]


def test_old_format_alone() -> None:
    assert parse_ld_cache(old_cache(SAMPLE, embed_new=False)) == EXPECTED


def test_glibc_hwcaps_entries_are_kept() -> None:
    subdir = f"{LIBDIR}/glibc-hwcaps/x86-64-v3/libfoo.so.1"
    data = new_cache(
        [(X86_64_LIBC6, "libfoo.so.1", subdir), (X86_64_LIBC6, "libfoo.so.1", f"{LIBDIR}/libfoo.so.1")],
        hwcaps=[1 << 62, 0],
    )
    assert [entry.path for entry in parse_ld_cache(data)] == [subdir, f"{LIBDIR}/libfoo.so.1"]


def test_undecodable_bytes_survive_as_surrogates() -> None:
    path = os.fsdecode(b"/opt/caf\xe9/libx.so.1")
    entries = parse_ld_cache(new_cache([(X86_64_LIBC6, "libx.so.1", path)]))
    assert os.fsencode(entries[0].path) == b"/opt/caf\xe9/libx.so.1"


def test_unknown_arch_has_zero_bits() -> None:
    # RISC-V: ldconfig records only the float ABI, the same for rv32 and rv64.
    entries = parse_ld_cache(new_cache([(0x1003, "libc.so.6", "/lib64/lp64d/libc.so.6")]))
    assert entries[0].bits == 0


def _with_u32(data: bytes, at: int, value: int) -> bytes:
    patched = bytearray(data)
    struct.pack_into("<I", patched, at, value)
    return bytes(patched)


ONE = new_cache([(X86_64_LIBC6, "libfoo.so.1", f"{LIBDIR}/libfoo.so.1")])
# The last string runs to the end of the file unterminated, len_strings shortened to match.
NO_NUL = _with_u32(ONE[:-1], 24, len(ONE) - 1 - 48 - 24)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"\x7fELF\x02\x01\x01" + bytes(64), r"not an ld.so.cache \(bad magic\)"),
        (b"glibc-ld.so.cache1.2" + bytes(64), r"unsupported cache version b'1.2'"),
        (b"glibc-ld.so.ca", "truncated header"),
        (ONE[:40], "truncated header"),
        (b"ld.so-1.7.0\0\1", "truncated header"),
        (
            _with_u32(ONE, 20, 0xFFFFFFFF),
            r"truncated entry table \(4294967295 entries do not fit in \d+ bytes\)",
        ),
        (
            b"ld.so-1.7.0\0" + struct.pack(_NATIVE + "I", 10**9),
            r"truncated entry table \(1000000000 entries do not fit in 16 bytes\)",
        ),
        (_with_u32(ONE, 24, 10**6), "truncated string table"),
        (_with_u32(ONE, 48 + 4, 10**6), "string offset 1000000 out of range"),
        (ONE[:-1], "truncated string table"),
        (NO_NUL, "string at offset .* is not NUL-terminated within 4096 bytes"),
        (ONE[:28] + b"\1" + ONE[29:], r"cache is marked invalid \(endianness flag 1\)"),
    ],
    ids=[
        "empty",
        "bad-magic",
        "bad-version",
        "short-magic",
        "truncated-new-header",
        "truncated-old-header",
        "nlibs-huge",
        "old-nlibs-huge",
        "len-strings-huge",
        "offset-out-of-range",
        "string-table-cut",
        "missing-nul",
        "endian-invalid",
    ],
)
def test_corrupt_input_is_one_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(LdCacheError, match=f"^{message}$"):
        parse_ld_cache(data)


def _mutants(data: bytes) -> list[bytes]:
    out = [data[:cut] for cut in range(0, len(data), 7)]
    for at in range(0, len(data), 7):
        out.append(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
    rng = random.Random(1234)  # noqa: S311 (a reproducible fuzz seed, not crypto)
    for _ in range(300):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutant[rng.randrange(len(mutant))] = rng.randrange(256)
        out.append(bytes(mutant))
    return out


def _only_ld_cache_errors(data: bytes) -> int:
    failures = 0
    for mutant in _mutants(data):
        try:
            parse_ld_cache(mutant)
        except LdCacheError:
            failures += 1
    return failures


def test_fuzzed_real_cache_raises_only_ld_cache_error(ldconfig_root: Path) -> None:
    assert _only_ld_cache_errors((ldconfig_root / "etc/ld.so.cache").read_bytes()) > 0


def test_fuzzed_hand_built_caches_raise_only_ld_cache_error() -> None:
    for data in (new_cache(SAMPLE, order=">", endian=3), old_cache(SAMPLE), old_cache(SAMPLE, False)):
        assert _only_ld_cache_errors(data) > 0


def test_read_errors_are_ld_cache_errors(tmp_path: Path) -> None:
    with pytest.raises(LdCacheError, match=r"^cannot read: No such file or directory$"):
        read_ld_cache(str(tmp_path / "missing"))
    with pytest.raises(LdCacheError, match=r"^cannot read: Is a directory$"):
        read_ld_cache(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(LdCacheError, match=r"^not a regular file$"):  # and no hang in open()
        read_ld_cache(str(fifo))
    big = tmp_path / "big"
    big.write_bytes(ONE)
    with pytest.raises(LdCacheError, match=f"^larger than {len(ONE) - 1} bytes$"):
        read_ld_cache(str(big), max_bytes=len(ONE) - 1)
    assert read_ld_cache(str(big), max_bytes=len(ONE))[0].name == "libfoo.so.1"


def test_this_machines_cache() -> None:
    if not os.path.exists("/etc/ld.so.cache"):
        pytest.skip("this machine has no /etc/ld.so.cache")
    entries = read_ld_cache("/etc/ld.so.cache")
    assert any(entry.name == "libc.so.6" for entry in entries)


def test_one_name_alone() -> None:
    data = new_cache(SAMPLE)
    assert parse_ld_cache(data, "libcuda.so.1") == EXPECTED[:2]
    assert parse_ld_cache(data, "libcuda.so") == []  # a key, not a prefix
    assert parse_ld_cache(old_cache(SAMPLE, embed_new=False), "libnvidia-ml.so.1") == EXPECTED[3:]
