"""A runtime's MANIFEST: what a tree holds, read back exactly, its ID, and the trees that do not match."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdictk.noderuntime.manifest import (
    HEADER,
    ManifestError,
    check_path,
    mismatch,
    parse,
    read,
    render,
    runtime_id,
    scan,
)

SHA = "0" * 64


def small_tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "python3.11").mkdir(parents=True)
    (root / "bin" / "python3").write_bytes(b"launcher")
    (root / "bin" / "python3").chmod(0o755)
    os.link(root / "bin" / "python3", root / "bin" / "cdictk-hook")
    (root / "lib" / "python3.11" / "os.py").write_text("# os\n")
    (root / "lib" / "python3.11" / "os.py").chmod(0o644)
    for directory in (root / "bin", root / "lib", root / "lib" / "python3.11"):
        directory.chmod(0o755)
    return root


def test_a_tree_is_listed_sorted_with_hard_links_after_their_file(tmp_path: Path) -> None:
    tree = small_tree(tmp_path / "tree")
    entries = scan(str(tree))
    assert [(e.kind, e.mode, e.path, e.target) for e in entries] == [
        ("d", 0o755, "bin", ""),
        ("f", 0o755, "bin/cdictk-hook", ""),  # the first name of the file, in byte order
        ("h", 0o755, "bin/python3", "bin/cdictk-hook"),
        ("d", 0o755, "lib", ""),
        ("d", 0o755, "lib/python3.11", ""),
        ("f", 0o644, "lib/python3.11/os.py", ""),
    ]
    text = render(entries)
    assert text.startswith(f"{HEADER}\n".encode()) and text.endswith(b"\n")
    assert parse(text) == entries
    (tree / "MANIFEST").write_bytes(text)
    assert read(str(tree)) == (text, entries)
    assert mismatch(str(tree), entries) is None


def test_the_id_is_the_manifests_hash_and_so_the_trees(tmp_path: Path) -> None:
    one = render(scan(str(small_tree(tmp_path / "one"))))
    two = render(scan(str(small_tree(tmp_path / "two"))))
    assert one == two and runtime_id(one) == runtime_id(two) and len(runtime_id(one)) == 16
    (tmp_path / "two" / "lib" / "python3.11" / "os.py").write_text("# os, changed\n")
    assert runtime_id(render(scan(str(tmp_path / "two")))) != runtime_id(one)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda t: (t / "lib" / "extra.py").write_text(""), "lib/extra.py: not in the manifest"),
        (lambda t: (t / "lib" / "python3.11" / "os.py").unlink(), "lib/python3.11/os.py: missing"),
        (lambda t: (t / "lib" / "python3.11" / "os.py").write_text("#"), "os.py: differs from the manifest"),
        (lambda t: (t / "lib" / "python3.11" / "os.py").chmod(0o600), "os.py: differs from the manifest"),
        (lambda t: (t / "lib").chmod(0o700), "lib: differs from the manifest"),
        (lambda t: (t / "lib" / "link").symlink_to("/etc"), "neither a directory nor a regular file"),
    ],
)
def test_a_tree_that_is_not_as_listed_says_where(tmp_path: Path, change: object, expected: str) -> None:
    tree = small_tree(tmp_path / "tree")
    entries = scan(str(tree))
    change(tree)  # type: ignore[operator]
    problem = mismatch(str(tree), entries)
    assert problem is not None and expected in problem


def test_a_hard_link_made_a_copy_is_a_mismatch(tmp_path: Path) -> None:
    tree = small_tree(tmp_path / "tree")
    entries = scan(str(tree))
    hook = tree / "bin" / "python3"
    hook.unlink()
    hook.write_bytes(b"launcher")
    hook.chmod(0o755)
    problem = mismatch(str(tree), entries)
    assert problem is not None and "bin/python3" in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"", "not a runtime manifest"),
        (b"something else\n", "not a runtime manifest"),
        (f"{HEADER}\nd 755 - bin".encode(), "not a runtime manifest"),  # no final newline
        (f"{HEADER}\nx 755 - bin\n".encode(), "line 2: not an entry"),
        (f"{HEADER}\nd 755 - bin\nd 755 - bin\n".encode(), "line 3: bin out of order, or twice"),
        (f"{HEADER}\nd 755 - lib\nd 755 - bin\n".encode(), "line 3: bin out of order"),
        (f"{HEADER}\nf 644 {SHA} lib/os.py\n".encode(), "its directory is not listed before it"),
        (f"{HEADER}\nd 777 - bin\n".encode(), "mode 777 is more than 755"),
        (f"{HEADER}\nd 7x5 - bin\n".encode(), "bad mode"),
        (f"{HEADER}\nf 644 abc bin\n".encode(), "bad digest"),
        (f"{HEADER}\nd 755 {SHA} bin\n".encode(), "bad digest"),
        (f"{HEADER}\nd 755 - bin\nh 755 {SHA} bin/a bin/b\n".encode(), "a hard link of no file"),
        (f"{HEADER}\nd 755 - ../etc\n".encode(), "not a path a runtime's manifest can hold"),
        ("é".encode(), "not ASCII"),
    ],
)
def test_a_bad_manifest_is_one_line(text: bytes, expected: str) -> None:
    with pytest.raises(ManifestError, match=expected):
        parse(text)


@pytest.mark.parametrize("path", ["", "/etc", "a//b", "a/./b", "a/../b", "a b", "a\nb", "ü"])
def test_paths_a_manifest_cannot_hold(path: str) -> None:
    with pytest.raises(ManifestError):
        check_path(path)


def test_reading_a_manifest_that_is_missing_or_no_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="MANIFEST: No such file"):
        read(str(tmp_path))
    (tmp_path / "MANIFEST").mkdir()
    with pytest.raises(ManifestError, match="MANIFEST"):
        read(str(tmp_path))
