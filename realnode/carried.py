"""What the bundle carries, made ready on the node: binaries unpacked, runc made to find its libseccomp.

The bundle's large programs are xz-compressed (the whole bundle travels in a few MiB); they are
unpacked into the check's work dir. runc is Debian's build, linked against ``libseccomp.so.2``, which a
bare node may lack. ``LD_LIBRARY_PATH`` cannot help: runc re-executes itself (``runc init``, from a
sealed copy of its own binary) with an environment of its own. So the unpacked copy's DT_NEEDED entry
``libseccomp.so.2`` is rewritten in place to an absolute path of the same length, a link in /tmp to
the carried library, made for this run and removed with it.
"""

from __future__ import annotations

import json
import lzma
import os
import secrets
import shutil
from dataclasses import dataclass

MANIFEST = "manifest.json"
SECCOMP = b"libseccomp.so.2"


@dataclass(frozen=True)
class Carried:
    """The bundle's files as this run uses them (paths in the work dir, None where not carried)."""

    bundle: str
    manifest: dict[str, object]
    runc: str
    seccomp_link: str | None
    busybox: str
    probe: str
    cuda_source: str
    wheels: str
    nvidia: dict[str, str]  # program name -> its unpacked path
    runtime: str | None = None  # the node runtime's tarball, unpacked by its own step (bundledruntime)


def read_manifest(bundle: str) -> dict[str, object]:
    with open(os.path.join(bundle, MANIFEST), encoding="utf-8") as handle:
        loaded: dict[str, object] = json.load(handle)
    return loaded


def unpack(source: str, target: str) -> str:
    """``source`` (``.xz`` or plain) as an executable file at ``target``."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if source.endswith(".xz"):
        with lzma.open(source, "rb") as packed, open(target, "wb") as out:
            shutil.copyfileobj(packed, out, 1 << 20)
    else:
        shutil.copyfile(source, target)
    os.chmod(target, 0o755)
    return target


def needed_at(binary: str, library: str) -> str:
    """Rewrites ``binary``'s DT_NEEDED ``libseccomp.so.2`` to a link of the same length in /tmp to
    ``library``; returns the link (the caller removes it)."""
    with open(binary, "rb") as handle:
        data = handle.read()
    entry = b"\0" + SECCOMP + b"\0"
    if data.count(entry) != 1:
        raise ValueError(f"{binary}: expected one {SECCOMP.decode()} entry, found {data.count(entry)}")
    link = "/tmp/sc" + secrets.token_hex(4)  # as long as libseccomp.so.2: the string table keeps its size
    assert len(link) == len(SECCOMP)
    os.symlink(os.path.abspath(library), link)
    with open(binary, "wb") as handle:
        handle.write(data.replace(entry, b"\0" + link.encode() + b"\0"))
    return link


def prepare(bundle: str, work: str) -> Carried:
    """Unpacks the bundle's programs under ``work``/bin."""
    manifest = read_manifest(bundle)
    files = manifest["files"]
    assert isinstance(files, dict)
    bin_dir = os.path.join(work, "bin")

    def path(key: str) -> str:
        return os.path.join(bundle, str(files[key]))

    runc = unpack(path("runc"), os.path.join(bin_dir, "runc"))
    seccomp_link = None
    if files.get("libseccomp"):
        library = os.path.join(work, "lib", "libseccomp.so.2")
        os.makedirs(os.path.dirname(library), exist_ok=True)
        shutil.copyfile(path("libseccomp"), library)
        seccomp_link = needed_at(runc, library)
    nvidia_files = manifest.get("nvidia") or {}
    assert isinstance(nvidia_files, dict)
    nvidia = {
        name: unpack(os.path.join(bundle, str(relative)), os.path.join(work, "nvidia", name))
        for name, relative in nvidia_files.items()
    }
    return Carried(
        bundle=bundle,
        manifest=manifest,
        runc=runc,
        seccomp_link=seccomp_link,
        busybox=unpack(path("busybox"), os.path.join(bin_dir, "busybox")),
        probe=unpack(path("probe"), os.path.join(bin_dir, "cuda-probe")),
        cuda_source=path("cuda_source"),
        wheels=path("wheels"),
        nvidia=nvidia,
        runtime=path("node_runtime") if files.get("node_runtime") else None,
    )
