"""Jetson's CSV files: strict parsing, the defaults under the driver root, ignore patterns, symlink
chains followed inside the root, dev globs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cdictk.node import csvfiles
from cdictk.node.csvfiles import CsvEntry, CsvSource, EntryType
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots

DEFAULTS = Path(csvfiles.DEFAULT_DIR.lstrip("/"))


def roots_at(root: Path) -> Roots:
    return Roots(str(root), str(root), str(root / "proc"), str(root / "sys"))


def test_lines_comments_and_blank_lines() -> None:
    text = "# a comment\n\ndev, /dev/nvmap\n  lib,/usr/lib/libcuda.so.1.1  \nsym, /a//b/../c\ndir, /usr/share/x\n"
    assert csvfiles.parse(text, "f.csv") == [
        CsvEntry(EntryType.DEV, "/dev/nvmap"),
        CsvEntry(EntryType.LIB, "/usr/lib/libcuda.so.1.1"),
        CsvEntry(EntryType.SYM, "/a/c"),
        CsvEntry(EntryType.DIR, "/usr/share/x"),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("lib /usr/lib/libcuda.so", "not 'type, path': 'lib /usr/lib/libcuda.so'"),
        ("file, /usr/lib/x", "unknown type 'file' (dev, lib, sym or dir)"),
        ("lib, usr/lib/x", "not an absolute path a spec can carry: 'usr/lib/x'"),
        ("lib, ", "not an absolute path a spec can carry: ''"),
        ("sym, /a::b", "not an absolute path a spec can carry: '/a::b'"),
    ],
)
def test_a_malformed_line_is_one_error_naming_file_and_line(line: str, reason: str) -> None:
    with pytest.raises(CdictkError) as caught:
        csvfiles.parse(f"# header\ndev, /dev/nvmap\n{line}\n", "/etc/x/drivers.csv")
    assert str(caught.value) == f"/etc/x/drivers.csv:3: {reason}"


def test_default_files_are_read_under_the_driver_root_and_missing_ones_skipped(tmp_path: Path) -> None:
    (tmp_path / DEFAULTS).mkdir(parents=True)
    (tmp_path / DEFAULTS / "l4t.csv").write_text("dir, /usr/share/nvidia\n")
    read = csvfiles.read_entries(roots_at(tmp_path), CsvSource())
    assert read.entries == [CsvEntry(EntryType.DIR, "/usr/share/nvidia")]
    assert read.read == [str(tmp_path / DEFAULTS / "l4t.csv")]
    assert read.absent == [str(tmp_path / DEFAULTS / name) for name in ("devices.csv", "drivers.csv")]


def test_no_csv_file_at_all_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match=r"^--csv\.file: no CSV files \(looked for .*devices\.csv"):
        csvfiles.read_entries(roots_at(tmp_path), CsvSource())


def test_a_given_file_must_exist_and_is_a_host_path(tmp_path: Path) -> None:
    given = tmp_path / "mine.csv"
    given.write_text("dev, /dev/nvmap\n")
    read = csvfiles.read_entries(roots_at(tmp_path / "root"), CsvSource((str(given),)))
    assert read.entries == [CsvEntry(EntryType.DEV, "/dev/nvmap")]
    with pytest.raises(CdictkError, match="No such file"):
        csvfiles.read_entries(roots_at(tmp_path), CsvSource((str(tmp_path / "gone.csv"),)))


def test_untrusted_files_are_capped_and_must_be_utf8(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(b"#" * (csvfiles.MAX_CSV_BYTES + 1))
    with pytest.raises(CdictkError, match="over the"):
        csvfiles.read_entries(roots_at(tmp_path), CsvSource((str(big),)))
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"lib, /usr/lib/caf\xe9.so\n")
    with pytest.raises(CdictkError, match="not UTF-8 text"):
        csvfiles.read_entries(roots_at(tmp_path), CsvSource((str(latin),)))
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(CdictkError, match="not a regular file"):
        csvfiles.read_entries(roots_at(tmp_path), CsvSource((str(fifo),)))


def test_ignore_patterns_match_the_path_or_with_a_double_star_the_name() -> None:
    patterns = ("**/libv4l*", "/usr/share/*")
    assert csvfiles.ignored("/usr/lib/aarch64-linux-gnu/libv4l2.so.0", patterns)
    assert csvfiles.ignored("/usr/share/nvidia", patterns)
    assert not csvfiles.ignored("/usr/lib/libcuda.so", patterns)


def test_links_are_followed_inside_the_root_and_each_becomes_a_link(tmp_path: Path) -> None:
    lib = tmp_path / "usr/lib/tegra"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.1.1").write_bytes(b"\x7fELF")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.1.1")
    (lib / "libcuda.so").symlink_to("/usr/lib/tegra/libcuda.so.1")  # absolute: inside the root
    (tmp_path / "usr/lib/escape.so").symlink_to("/etc/passwd")
    (tmp_path / "usr/share/pva").mkdir(parents=True)
    entries = [
        CsvEntry(EntryType.SYM, "/usr/lib/tegra/libcuda.so"),
        CsvEntry(EntryType.LIB, "/usr/lib/tegra/libcuda.so.1.1"),
        CsvEntry(EntryType.LIB, "/usr/lib/escape.so"),
        CsvEntry(EntryType.DIR, "/usr/share/pva"),
        CsvEntry(EntryType.DIR, "/usr/lib/tegra/libcuda.so.1.1"),  # not a directory
        CsvEntry(EntryType.LIB, "/usr/lib/v4l2.so"),
        CsvEntry(EntryType.LIB, "/usr/lib/ignored.so"),
    ]
    found = csvfiles.find_files(roots_at(tmp_path), entries, ("**/ignored.so",))
    assert found.links == [
        ("/usr/lib/tegra/libcuda.so.1", "/usr/lib/tegra/libcuda.so"),
        ("libcuda.so.1.1", "/usr/lib/tegra/libcuda.so.1"),
    ]  # none for what is missing
    assert found.files == [
        ("/usr/lib/tegra/libcuda.so.1.1", str(lib / "libcuda.so.1.1"), False),
        ("/usr/share/pva", str(tmp_path / "usr/share/pva"), True),
    ]
    # The host's /etc/passwd is never what a link in the root names.
    assert found.missing == ["/usr/lib/escape.so", "/usr/lib/tegra/libcuda.so.1.1", "/usr/lib/v4l2.so"]


def test_the_tegra_release_is_mounted_when_there(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R36\n")
    found = csvfiles.find_files(roots_at(tmp_path), [], ())
    assert found.files == [("/etc/nv_tegra_release", str(tmp_path / "etc/nv_tegra_release"), False)]


@pytest.mark.root
def test_dev_entries_are_char_devices_and_globs_match_each(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "nvgpu/igpu0").mkdir(parents=True)
    for path, minor in (("nvmap", 1), ("nvgpu/igpu0/ctrl", 2), ("nvgpu/igpu0/as", 3)):
        os.mknod(dev / path, stat.S_IFCHR | 0o666, os.makedev(486, minor))
    (dev / "nvhost-fake").write_text("not a node")
    entries = [
        CsvEntry(EntryType.DEV, "/dev/nvmap"),
        CsvEntry(EntryType.DEV, "/dev/nvgpu/igpu0/*"),
        CsvEntry(EntryType.DEV, "/dev/nvhost-*"),
        CsvEntry(EntryType.LIB, "/dev/nvmap"),
    ]
    nodes, missing = csvfiles.device_nodes(roots_at(tmp_path), entries)
    assert [(node.path, node.minor) for node in nodes] == [
        ("/dev/nvmap", 1),
        ("/dev/nvgpu/igpu0/as", 3),
        ("/dev/nvgpu/igpu0/ctrl", 2),
    ]
    assert missing == ["/dev/nvhost-*"]


def test_globs_in_any_component_match_inside_the_root(tmp_path: Path) -> None:
    for path in (
        "usr/lib/tegra/libnvos.so",
        "usr/lib/tegra/libnvrm.so",
        "usr/lib/tegra-egl/libEGL_nvidia.so.0",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"\x7fELF")
    (tmp_path / "usr/lib/tegra/notes.txt").write_text("x")
    (tmp_path / "usr/lib/link").symlink_to("/usr/lib/tegra")  # absolute: inside the root
    root = str(tmp_path)
    assert csvfiles.expand(root, "/usr/lib/tegra*/lib*.so*") == [
        "/usr/lib/tegra/libnvos.so",
        "/usr/lib/tegra/libnvrm.so",
        "/usr/lib/tegra-egl/libEGL_nvidia.so.0",
    ]
    assert csvfiles.expand(root, "/usr/lib/link/libnv*") == [
        "/usr/lib/tegra/libnvos.so",
        "/usr/lib/tegra/libnvrm.so",
    ]
    assert csvfiles.expand(root, "/usr/lib/none*/x") == []
    assert csvfiles.expand(root, "/no/glob") == ["/no/glob"]
    entries = [CsvEntry(EntryType.LIB, "/usr/lib/tegra/lib*.so"), CsvEntry(EntryType.LIB, "/usr/lib/x*.so")]
    found = csvfiles.find_files(roots_at(tmp_path), entries, ("**/libnvrm.so",))
    assert [path for path, _, _ in found.files] == ["/usr/lib/tegra/libnvos.so"]
    assert found.missing == ["/usr/lib/x*.so"]


def test_a_file_someone_else_could_change_is_refused(tmp_path: Path) -> None:
    given = tmp_path / "drivers.csv"
    given.write_text("lib, /etc/shadow\n")
    given.chmod(0o666)
    with pytest.raises(CdictkError) as caught:
        csvfiles.read_entries(roots_at(tmp_path), CsvSource((str(given),)))
    assert str(caught.value).startswith(f"{given}: not trusted (")
    assert str(caught.value).endswith("): make it root's alone")
    given.chmod(0o644)
    assert len(csvfiles.read_entries(roots_at(tmp_path), CsvSource((str(given),))).entries) == 1
