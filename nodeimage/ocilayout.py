"""The OCI image layout (image-spec 1.1) of the image, and one tar of it that every tool loads.

The layout is a directory: ``oci-layout``, ``index.json`` (one manifest, named by the
``org.opencontainers.image.ref.name`` annotation) and ``blobs/sha256/``: the layers, the image config and
the manifest. The JSON documents are written with sorted keys and no spaces, and the config's times are
the build's epoch, so the manifest's digest (the image's) follows from the layers alone.

The archive holds the layout and, beside it, the ``manifest.json`` of ``docker save``, naming the same
blobs: containerd (``ctr images import``), podman and docker (``load``) and skopeo (``oci-archive:``)
each read one of the two.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeimage.tarlayer import Layer

LAYOUT_VERSION = "1.0.0"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True, slots=True)
class Blob:
    """A content descriptor: what a manifest or an index points at."""

    media_type: str
    digest: str
    size: int

    def descriptor(self) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True, slots=True)
class ImageSettings:
    """What the image config says besides its layers. ``history``: one line per layer, in order."""

    architecture: str
    entrypoint: Sequence[str]
    env: Sequence[str]
    history: Sequence[str]
    labels: dict[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    os: str = "linux"


def canonical(document: object) -> bytes:
    """A JSON document as written into the layout: sorted keys, no spaces, UTF-8."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def timestamp(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest


def _write(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def put_blob(layout: Path, media_type: str, data: bytes) -> Blob:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    _write(blob_path(layout, digest), data)
    return Blob(media_type, digest, len(data))


def image_config(settings: ImageSettings, layers: Sequence[Layer], epoch: int) -> dict[str, object]:
    if len(settings.history) != len(layers):
        raise ValueError(f"{len(layers)} layers but {len(settings.history)} history lines")
    created = timestamp(epoch)
    return {
        "architecture": settings.architecture,
        "os": settings.os,
        "created": created,
        "config": {
            "Entrypoint": list(settings.entrypoint),
            "Env": list(settings.env),
            "WorkingDir": settings.working_dir,
            "Labels": dict(settings.labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": line} for line in settings.history],
    }


def write_layout(
    layout: Path, layers: Sequence[Layer], settings: ImageSettings, reference: str, epoch: int
) -> Blob:
    """The layout's documents for ``layers``, whose blobs are in ``layout`` already; returns the manifest.

    The index names one manifest, with the platform and ``reference`` as its ref name.
    """
    for layer in layers:
        if not blob_path(layout, layer.digest).is_file():
            raise FileNotFoundError(f"layer {layer.digest} is not in {layout}")
    config = put_blob(layout, CONFIG, canonical(image_config(settings, layers, epoch)))
    manifest_document = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config.descriptor(),
        "layers": [Blob(LAYER, layer.digest, layer.size).descriptor() for layer in layers],
    }
    manifest = put_blob(layout, MANIFEST, canonical(manifest_document))
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {
                **manifest.descriptor(),
                "platform": {"architecture": settings.architecture, "os": settings.os},
                "annotations": {REF_NAME: reference},
            }
        ],
    }
    _write(layout / "index.json", canonical(index))
    _write(layout / "oci-layout", canonical({"imageLayoutVersion": LAYOUT_VERSION}))
    return manifest


@dataclass(frozen=True, slots=True)
class Image:
    """The one image of a layout, as written: its reference, its manifest's digest, the manifest and the
    image config."""

    reference: str
    digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]

    def blobs(self) -> list[str]:
        """The digests of every blob it is made of, the manifest's own included."""
        layers = [layer["digest"] for layer in self.manifest["layers"]]
        return [self.digest, self.manifest["config"]["digest"], *layers]


def read_image(layout: Path) -> Image:
    index = json.loads((layout / "index.json").read_bytes())
    (entry,) = index["manifests"]
    manifest = json.loads(blob_path(layout, entry["digest"]).read_bytes())
    config = json.loads(blob_path(layout, manifest["config"]["digest"]).read_bytes())
    return Image(entry["annotations"][REF_NAME], entry["digest"], manifest, config)


def write_archive(layout: Path, out: Path, epoch: int) -> None:
    """``layout`` as one tar at ``out`` (atomically), with ``docker save``'s ``manifest.json`` beside it.

    Deterministic like the layers: sorted members, the epoch as every time, owner 0.
    """
    image = read_image(layout)

    def member(digest: str) -> str:
        return str(blob_path(Path(), digest))

    layers = [member(layer["digest"]) for layer in image.manifest["layers"]]
    docker_manifest = [
        {
            "Config": member(image.manifest["config"]["digest"]),
            "RepoTags": [image.reference],
            "Layers": layers,
        }
    ]
    documents = {
        "index.json": (layout / "index.json").read_bytes(),
        "manifest.json": canonical(docker_manifest),
        "oci-layout": (layout / "oci-layout").read_bytes(),
    }
    blobs = sorted(set(image.blobs()))
    temp = out.with_name(f".{out.name}.tmp")
    with open(temp, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def header(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.size, info.mtime = kind, mode, size, epoch
            return info

        for directory in ("blobs", "blobs/sha256"):
            tar.addfile(header(directory, tarfile.DIRTYPE, 0o755))
        for digest in blobs:
            path = blob_path(layout, digest)
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                tar.addfile(header(member(digest), tarfile.REGTYPE, 0o644, size), handle)
        for name, data in sorted(documents.items()):
            tar.addfile(header(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        tar.close()
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(temp, out)
