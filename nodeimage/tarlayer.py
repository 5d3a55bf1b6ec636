"""A directory tree as one image layer whose bytes depend only on what the tree holds.

The same tree gives the same layer, byte for byte, on every run: entries in sorted order (a directory
before what it holds), modification times clamped to the build's epoch (a file older than it keeps its
own: Debian's byte-compiled standard library checks its sources' times), the numeric owner kept and the
owner's names left empty, hard links kept as links, no extended attributes (file capabilities and
overlayfs's marks included), and gzip without a name or a time in its header. Device nodes, sockets and
FIFOs are refused: an image carries none (a runtime makes /dev), and overlayfs records a deleted file as
a 0:0 character device, which must never reach a layer as one.

The tar is hashed as it is written (the diff ID the image config lists) and so is the gzip stream (the
blob's digest), so a layer of a few hundred megabytes is read once and never held in memory.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nodeimage import ImageError

# Speed over the last few percent of size: CI builds the image on every run.
GZIP_LEVEL = 3


@dataclass(frozen=True, slots=True)
class Prune:
    """What of a tree its layer leaves out: paths relative to the tree's root, in POSIX form.

    ``emptied`` directories are kept with nothing in them (/dev, /tmp, logs and caches); ``omitted``
    paths are left out with whatever is below them.
    """

    emptied: frozenset[str] = frozenset()
    omitted: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Layer:
    """A layer blob: its digest and size (what the manifest lists) and the uncompressed tar's digest
    (the diff ID in the image config)."""

    digest: str
    diff_id: str
    size: int


class _Hashing(io.RawIOBase):
    """Writes through to ``out`` and hashes and counts what passes."""

    def __init__(self, out: io.RawIOBase | io.BufferedIOBase | gzip.GzipFile) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.count += len(data)
        self.out.write(data)
        return len(data)


def entries(root: Path, prune: Prune = Prune()) -> Iterator[tuple[str, os.stat_result]]:
    """Every path below ``root`` (relative, POSIX form) with its lstat, a directory before its contents,
    siblings in the order of their names' bytes; ``root`` itself is not one."""

    def walk(directory: str, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
        with os.scandir(directory) as listing:
            found = sorted(listing, key=lambda entry: os.fsencode(entry.name))
        for entry in found:
            relative = prefix + entry.name
            if relative in prune.omitted:
                continue
            status = entry.stat(follow_symlinks=False)
            yield relative, status
            if stat.S_ISDIR(status.st_mode) and relative not in prune.emptied:
                yield from walk(entry.path, relative + "/")

    return walk(os.fspath(root), "")


def _header(name: str, status: os.stat_result, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(status.st_mode)
    info.uid, info.gid = status.st_uid, status.st_gid
    info.uname = info.gname = ""
    info.mtime = min(int(status.st_mtime), epoch)
    return info


def _add_file(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str, status: os.stat_result) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if (opened.st_ino, opened.st_size) != (status.st_ino, status.st_size):
            raise ImageError(f"{path} changed while the layer was written")
        info.type = tarfile.REGTYPE
        info.size = status.st_size
        tar.addfile(info, handle)


def write_tar(
    root: Path, out: io.RawIOBase | io.BufferedIOBase, *, epoch: int, prune: Prune = Prune(), top: str = ""
) -> None:
    """The tar of ``root`` (what :data:`Prune` leaves in) to the stream ``out``; with ``top``, ``root``
    itself is a directory of that name, which holds the rest (a release tarball's one directory)."""
    first_of: dict[tuple[int, int], str] = {}
    above = f"{top}/" if top else ""
    with tarfile.open(
        fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape"
    ) as tar:
        if top:
            info = _header(top, os.lstat(root), epoch)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for relative, status in entries(root, prune):
            name = above + relative
            path = os.path.join(root, relative)
            info = _header(name, status, epoch)
            kind = stat.S_IFMT(status.st_mode)
            if kind == stat.S_IFDIR:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == stat.S_IFLNK:
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                tar.addfile(info)
            elif kind == stat.S_IFREG:
                key = (status.st_dev, status.st_ino)
                if status.st_nlink > 1 and key in first_of:
                    info.type = tarfile.LNKTYPE
                    info.linkname = first_of[key]
                    tar.addfile(info)
                    continue
                if status.st_nlink > 1:
                    first_of[key] = name
                _add_file(tar, info, path, status)
            else:
                what = {stat.S_IFCHR: "character device", stat.S_IFBLK: "block device"}.get(
                    kind, "socket" if kind == stat.S_IFSOCK else "FIFO"
                )
                raise ImageError(f"{path} is a {what}: an image layer carries none")


def write_layer(
    root: Path, out: Path, *, epoch: int, prune: Prune = Prune(), top: str = "", level: int = GZIP_LEVEL
) -> Layer:
    """``root`` as a gzip-compressed layer at ``out`` (created, or replaced); ``top`` as for
    :func:`write_tar`, ``level`` gzip's."""
    with open(out, "wb") as raw:
        blob = _Hashing(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=blob, compresslevel=level, mtime=0) as packed:
            tar = _Hashing(packed)
            write_tar(root, tar, epoch=epoch, prune=prune, top=top)
        raw.flush()
        os.fsync(raw.fileno())
    return Layer(f"sha256:{blob.sha.hexdigest()}", f"sha256:{tar.sha.hexdigest()}", blob.count)
