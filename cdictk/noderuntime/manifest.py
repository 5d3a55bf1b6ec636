"""A runtime version's ``MANIFEST``: every directory and file of the tree, and the version's ID.

One line per entry, sorted by path (bytes), after a header line::

    d 755 - lib
    f 644 SHA256 lib/libc.so.6
    h 755 SHA256 bin/cdictk-hook bin/cdictk     (a hard link of an earlier f line's file)

Paths are relative, plain ASCII without spaces; no symlinks, devices or other kinds. The ID is the
start of the SHA-256 of the manifest's bytes, so the same tree has the same ID wherever it was built,
and a tree is intact when it holds exactly what its manifest says: the same kinds, modes and contents,
the hard links as one file, nothing more.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

HEADER = "cdictk-node-runtime-manifest 1"
ID_LENGTH = 16
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-/@~,=")
_MAX_SIZE = 16 << 20
_CHUNK = 1 << 20


class ManifestError(Exception):
    """A manifest that cannot be read, or a tree that does not match it: one line."""


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str  # "d", "f" or "h"
    mode: int  # permission bits
    sha256: str  # "-" for a directory
    path: str
    target: str = ""  # "h": the path of the file it is a hard link of


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_path(path: str) -> str:
    """``path`` if a manifest can hold it: relative, normalised, of plain characters."""
    if (
        not path
        or path.startswith("/")
        or not _PATH_CHARS.issuperset(path)
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        raise ManifestError(f"{path!r}: not a path a runtime's manifest can hold")
    return path


def scan(tree: str) -> list[Entry]:
    """The entries of the directory ``tree`` as it is (its MANIFEST left out), sorted; files with the
    same inode are one ``f`` and ``h`` lines after it."""
    entries: list[Entry] = []
    first: dict[tuple[int, int], Entry] = {}
    for path in _walk(tree, ""):
        full = os.path.join(tree, path)
        info = os.lstat(full)
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            entries.append(Entry("d", mode, "-", path))
        elif stat.S_ISREG(info.st_mode):
            key = (info.st_dev, info.st_ino)
            if key in first:
                entries.append(Entry("h", mode, first[key].sha256, path, first[key].path))
            else:
                first[key] = Entry("f", mode, file_sha256(full), path)
                entries.append(first[key])
        else:
            raise ManifestError(f"{full}: neither a directory nor a regular file")
    return entries


def _walk(tree: str, relative: str) -> Iterator[str]:
    """Every path under ``tree/relative`` but the top MANIFEST, sorted as the manifest is (bytes)."""
    names = sorted(os.listdir(os.path.join(tree, relative) if relative else tree), key=os.fsencode)
    for name in names:
        path = f"{relative}/{name}" if relative else name
        if path == "MANIFEST":
            continue
        yield check_path(path)
        if os.path.isdir(os.path.join(tree, path)) and not os.path.islink(os.path.join(tree, path)):
            yield from _walk(tree, path)


def render(entries: list[Entry]) -> bytes:
    ordered = sorted(entries, key=lambda entry: entry.path.encode())
    lines = [HEADER]
    for entry in ordered:
        words = [entry.kind, f"{entry.mode:o}", entry.sha256, entry.path]
        if entry.kind == "h":
            words.append(entry.target)
        lines.append(" ".join(words))
    return ("\n".join(lines) + "\n").encode()


def runtime_id(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()[:ID_LENGTH]


def parse(text: bytes) -> list[Entry]:
    """The entries of a manifest's bytes; every problem raises ManifestError."""
    if len(text) > _MAX_SIZE:
        raise ManifestError(f"larger than {_MAX_SIZE} bytes")
    try:
        lines = text.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise ManifestError("not ASCII") from None
    if not lines or lines[0] != HEADER or lines[-1] != "":
        raise ManifestError(f"not a runtime manifest (its first line is not {HEADER!r})")
    entries: list[Entry] = []
    files: dict[str, Entry] = {}
    directories: set[str] = set()
    previous = ""
    for number, line in enumerate(lines[1:-1], start=2):
        entry = _entry(line, number)
        if previous and entry.path.encode() <= previous.encode():
            raise ManifestError(f"line {number}: {entry.path} out of order, or twice")
        previous = entry.path
        parent = entry.path.rpartition("/")[0]
        if parent and parent not in directories:
            raise ManifestError(f"line {number}: {entry.path}: its directory is not listed before it")
        if entry.kind == "d":
            directories.add(entry.path)
        elif entry.kind == "f":
            files[entry.path] = entry
        elif entry.kind == "h":
            target = files.get(entry.target)
            if target is None or target.sha256 != entry.sha256 or target.mode != entry.mode:
                raise ManifestError(f"line {number}: {entry.path}: a hard link of no file listed before it")
        entries.append(entry)
    return entries


def _entry(line: str, number: int) -> Entry:
    words = line.split(" ")
    kinds = {"d": 4, "f": 4, "h": 5}
    if not words or words[0] not in kinds or len(words) != kinds[words[0]]:
        raise ManifestError(f"line {number}: not an entry: {line[:80]!r}")
    kind, mode_text, digest, path = words[:4]
    try:
        mode = int(mode_text, 8)
    except ValueError:
        raise ManifestError(f"line {number}: bad mode {mode_text!r}") from None
    if mode & ~0o755:
        raise ManifestError(f"line {number}: mode {mode_text} is more than 755")
    hexdigits = len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
    if (kind == "d") != (digest == "-") or (kind != "d" and not hexdigits):
        raise ManifestError(f"line {number}: bad digest {digest[:80]!r}")
    target = check_path(words[4]) if kind == "h" else ""
    return Entry(kind, mode, digest, check_path(path), target)


def read(tree: str) -> tuple[bytes, list[Entry]]:
    """The manifest of the runtime at ``tree``: its bytes and entries."""
    path = os.path.join(tree, "MANIFEST")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ManifestError(f"{path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ManifestError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as handle:
        text = handle.read(_MAX_SIZE + 1)
    try:
        return text, parse(text)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def mismatch(tree: str, entries: list[Entry]) -> str | None:
    """The first difference between the tree at ``tree`` and ``entries``, in one line; None when it
    holds exactly what they list."""
    try:
        found = scan(tree)
    except (OSError, ManifestError) as exc:
        return f"{tree}: {exc}"
    wanted = {entry.path: entry for entry in entries}
    there = {entry.path: entry for entry in found}
    for path in sorted(set(wanted) | set(there)):
        expected, actual = wanted.get(path), there.get(path)
        if expected is None:
            return f"{tree}/{path}: not in the manifest"
        if actual is None:
            return f"{tree}/{path}: missing"
        if (expected.kind, expected.mode, expected.sha256) != (actual.kind, actual.mode, actual.sha256):
            return f"{tree}/{path}: differs from the manifest"
        if expected.kind == "h" and actual.target != expected.target:
            return f"{tree}/{path}: not a hard link of {expected.target}"
    return None
