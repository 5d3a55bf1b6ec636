"""``python -m nodeimage tarball`` (``make node-tarball``): the node runtime of the image ``make image``
built, as one tarball for nodes without Kubernetes.

``cdictk-node-VERSION-ARCH.tar.gz`` holds one directory, ``cdictk-node-VERSION/``, which is the runtime
exactly as the image carries it (its MANIFEST lists every file): the runtime is built once, in the
image, and this ships the same tree a second way. On the node, with nothing but its kernel::

    tar xzf cdictk-node-0.1.0-x86_64.tar.gz
    ./cdictk-node-0.1.0/bin/cdictk system install --runtime containerd

The same runtime gives the same bytes: tarlayer's tar (entries sorted, times clamped to the source's
epoch, numeric owners and no names) in a gzip stream without a name or a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cdictk.noderuntime import manifest
from nodeimage import ImageError, imageroot, makeimage
from nodeimage.tarlayer import write_layer

# gzip's own default: smaller than the image layers' level 3 at about its speed, where 9 gains next to
# nothing for a much slower build.
LEVEL = 6


@dataclass(frozen=True, slots=True)
class Tarball:
    path: Path
    runtime_id: str
    size: int


def runtime_in(image_dir: Path) -> Path:
    """Where ``make image`` left the runtime it built: in the image's cdictk layer, as staged."""
    return image_dir / "cdictk" / imageroot.layout().bundle.lstrip("/")


def name(repo: Path = makeimage.REPO) -> str:
    return f"cdictk-node-{makeimage.project(repo)['version']}"


def build(image_dir: Path, out: Path, repo: Path = makeimage.REPO) -> Tarball:
    """The tarball of the runtime in ``image_dir`` (``make image``'s output) into ``out``."""
    bundle = runtime_in(image_dir)
    try:
        text, entries = manifest.read(str(bundle))
    except manifest.ManifestError as exc:
        raise ImageError(f"{bundle}: no node runtime there ({exc}): make image builds it") from None
    problem = manifest.mismatch(str(bundle), entries)
    if problem is not None:
        raise ImageError(f"{bundle}: the runtime is not as its manifest says: {problem}")
    top = name(repo)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{top}-{makeimage.machine()}.tar.gz"
    partial = out / f".{path.name}.partial"
    try:
        layer = write_layer(bundle, partial, epoch=makeimage.source_epoch(repo), top=top, level=LEVEL)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return Tarball(path, manifest.runtime_id(text), layer.size)
