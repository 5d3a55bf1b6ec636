"""The images a pod needs, built here and imported into containerd's ``k8s.io`` namespace: nothing pulled.

- the pause image: a static C program (pause.c) that sleeps until SIGTERM or SIGINT and reaps children,
  as registry.k8s.io/pause does; containerd's CRI plugin starts one per pod as its sandbox;
- the workload images: a root file system (the cached Debian rootfs, or busybox) as one layer, with an
  image config (env, command) as ``docker save`` writes it.

The layer is streamed to a file and hashed as it is written: the Debian rootfs is about 175 MB.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.e2e.daemons import goarch

HERE = Path(__file__).resolve().parent
PAUSE_SOURCE = HERE / "pause.c"
PAUSE_IMAGE = "localhost/cdictk-pause:1.0"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class _Hashing(io.RawIOBase):
    """A file that hashes what is written to it."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self.out = out
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        return self.out.write(data)


def docker_archive(
    rootfs: Path,
    out: Path,
    reference: str,
    *,
    env: Sequence[str] = (),
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = ("/bin/sh",),
) -> None:
    """A one-layer image of ``rootfs`` in the format `docker save` writes, which `ctr images import` reads."""
    layer_path = out.with_suffix(".layer")
    with open(layer_path, "wb") as raw:
        hashing = _Hashing(raw)
        with tarfile.open(fileobj=hashing, mode="w|") as tar:
            for entry in sorted(os.listdir(rootfs)):
                tar.add(rootfs / entry, arcname=entry)
        diff_id = hashing.sha.hexdigest()
    config: dict[str, object] = {
        "architecture": goarch(),
        "os": "linux",
        "config": {"Env": [DEFAULT_PATH, *env], "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd)},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "cdictk end-to-end tests"}],
    }
    config_bytes = json.dumps(config).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [f"{diff_id}/layer.tar"]}]
    try:
        with tarfile.open(out, mode="w") as tar:
            tar.add(layer_path, arcname=f"{diff_id}/layer.tar")
            for name, data in ((config_name, config_bytes), ("manifest.json", json.dumps(manifest).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
    finally:
        layer_path.unlink()


def pause_archive(work: Path) -> Path:
    """The pause image as a docker archive under ``work``."""
    root = work / "pause-rootfs"
    root.mkdir(parents=True)
    subprocess.run(["gcc", "-static", "-O2", "-o", str(root / "pause"), str(PAUSE_SOURCE)], check=True)
    out = work / "pause.tar"
    docker_archive(root, out, PAUSE_IMAGE, entrypoint=["/pause"], cmd=[])
    return out
