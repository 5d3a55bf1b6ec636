"""nodeimage/ocilayout.py: the layout's documents (index, manifest, config) as image-spec 1.1 has them,
a digest that follows from the layers and settings alone, and an archive that is the same bytes each
time and names the same blobs for OCI and docker readers."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from nodeimage.ocilayout import (
    CONFIG,
    LAYER,
    MANIFEST,
    REF_NAME,
    ImageSettings,
    blob_path,
    canonical,
    read_image,
    timestamp,
    write_archive,
    write_layout,
)
from nodeimage.tarlayer import Layer, write_layer

EPOCH = 1_700_000_000
REFERENCE = "registry.example.com/cdictk:9.9.9"
SETTINGS = ImageSettings(
    architecture="amd64",
    entrypoint=["/venv/bin/cdictk"],
    env=["PATH=/venv/bin:/usr/bin:/bin"],
    history=["base", "top"],
    labels={"org.opencontainers.image.version": "9.9.9"},
)


def layers_in(layout: Path, tmp_path: Path) -> list[Layer]:
    (layout / "blobs" / "sha256").mkdir(parents=True)
    made = []
    for name in ("base", "top"):
        tree = tmp_path / f"tree-{name}"
        (tree / name).mkdir(parents=True, exist_ok=True)
        (tree / name / "file").write_text(f"{name}\n")
        partial = layout / "partial"
        layer = write_layer(tree, partial, epoch=EPOCH)
        os.replace(partial, blob_path(layout, layer.digest))
        made.append(layer)
    return made


def test_the_documents_are_the_image_specs(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    layers = layers_in(layout, tmp_path)
    manifest = write_layout(layout, layers, SETTINGS, REFERENCE, EPOCH)
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2
    (entry,) = index["manifests"]
    assert entry["mediaType"] == MANIFEST
    assert entry["digest"] == manifest.digest
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert entry["annotations"] == {REF_NAME: REFERENCE}
    image = read_image(layout)
    assert image.reference == REFERENCE
    assert image.manifest["config"]["mediaType"] == CONFIG
    assert [(d["mediaType"], d["digest"], d["size"]) for d in image.manifest["layers"]] == [
        (LAYER, layer.digest, layer.size) for layer in layers
    ]
    config = image.config
    assert config["architecture"] == "amd64"
    assert config["os"] == "linux"
    assert config["created"] == "2023-11-14T22:13:20Z" == timestamp(EPOCH)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]}
    assert config["config"] == {
        "Entrypoint": ["/venv/bin/cdictk"],
        "Env": ["PATH=/venv/bin:/usr/bin:/bin"],
        "WorkingDir": "/",
        "Labels": {"org.opencontainers.image.version": "9.9.9"},
    }
    assert [entry["created_by"] for entry in config["history"]] == ["base", "top"]
    # Every blob is stored under its own digest, in the canonical form.
    for digest in image.blobs():
        data = blob_path(layout, digest).read_bytes()
        assert digest == f"sha256:{hashlib.sha256(data).hexdigest()}"
    for digest in image.blobs()[:2]:
        data = blob_path(layout, digest).read_bytes()
        assert data == canonical(json.loads(data))


def test_the_digest_follows_from_the_layers_and_settings_and_not_from_the_name(tmp_path: Path) -> None:
    first = write_layout(tmp_path / "a", layers_in(tmp_path / "a", tmp_path), SETTINGS, REFERENCE, EPOCH)
    renamed = write_layout(tmp_path / "b", layers_in(tmp_path / "b", tmp_path), SETTINGS, "other:1", EPOCH)
    assert first == renamed
    later = write_layout(tmp_path / "c", layers_in(tmp_path / "c", tmp_path), SETTINGS, REFERENCE, EPOCH + 1)
    assert later.digest != first.digest


def test_a_layer_missing_from_the_layout_or_a_history_line_short_is_an_error(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    layers = layers_in(layout, tmp_path)
    with pytest.raises(ValueError, match="2 layers but 1 history lines"):
        write_layout(layout, layers, ImageSettings("amd64", [], [], ["one"]), REFERENCE, EPOCH)
    blob_path(layout, layers[1].digest).unlink()
    with pytest.raises(FileNotFoundError, match=layers[1].digest):
        write_layout(layout, layers, SETTINGS, REFERENCE, EPOCH)


def test_the_archive_holds_the_layout_and_dockers_manifest_the_same_bytes_each_time(tmp_path: Path) -> None:
    layout = tmp_path / "oci"
    write_layout(layout, layers_in(layout, tmp_path), SETTINGS, REFERENCE, EPOCH)
    # A blob of an earlier build left in the layout stays out of the archive.
    (blob_path(layout, "sha256:" + "0" * 64)).write_text("stale")
    write_archive(layout, tmp_path / "one.tar", EPOCH)
    write_archive(layout, tmp_path / "two.tar", EPOCH)
    assert (tmp_path / "one.tar").read_bytes() == (tmp_path / "two.tar").read_bytes()
    image = read_image(layout)
    with tarfile.open(tmp_path / "one.tar") as tar:
        found = tar.getmembers()
        names = [member.name for member in found]
        blobs = sorted(f"blobs/sha256/{digest.split(':')[1]}" for digest in image.blobs())
        assert names == ["blobs", "blobs/sha256", *blobs, "index.json", "manifest.json", "oci-layout"]
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in found} == {(EPOCH, 0, 0, "", "")}
        docker = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        for name in blobs:
            assert tar.extractfile(name).read() == (layout / name).read_bytes()  # type: ignore[union-attr]
    config = image.manifest["config"]["digest"].split(":")[1]
    layers = [f"blobs/sha256/{layer['digest'].split(':')[1]}" for layer in image.manifest["layers"]]
    assert docker == [{"Config": f"blobs/sha256/{config}", "RepoTags": [REFERENCE], "Layers": layers}]
    assert not (tmp_path / ".one.tar.tmp").exists()
