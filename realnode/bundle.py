"""``make real-node-bundle``: one directory to carry to a bare GPU node (no pip index, no runc, no images).

It holds the check (``real-node-check`` and the ``realnode`` modules it runs, standard library only);
wheels of cdictk and its dependencies for CPython 3.11 and 3.12 on manylinux x86_64, with pip's own
wheel (the node's Python may have no pip); this machine's runc (Debian's, with the libseccomp it links
against) and static busybox; the CUDA probe built here with gcc, and the CUDA program's source for the
node's nvcc; the node runtime (cdictk.noderuntime) of the DaemonSet's image that ``make image``
built, as one xz-compressed tar (the image's own runtime, byte for byte: the check installs it and runs
the GPU containers' hooks through it); and, given ``--nvidia-tools DIR``, NVIDIA's nvidia-ctk,
nvidia-cdi-hook, nvidia-container-runtime and nvidia-container-runtime-hook (built ad hoc from their
source, never in the repository). Large programs are xz-compressed; the check unpacks them. A
manifest says what is where. The bundle must stay under 60 MiB (what the device tool carries, with the
repository, is 64).

Usage: python -m realnode.bundle --out DIR [--image DIR] [--nvidia-tools DIR] [--python-version 3.11 ...]
(repository root, in the venv, after make image; needs gcc, runc, busybox-static and PyPI)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cdictk.noderuntime import manifest as runtime_manifest
from nodeimage import imageroot
from nodeimage.ocilayout import read_image
from nodeimage.tarlayer import write_tar
from realnode import imagefs

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PYTHONS = ("3.11", "3.12")
# pip matches manylinux tags exactly: every one a glibc 2.39 node (Ubuntu 24.04) can load.
PLATFORMS = (
    "manylinux1_x86_64",
    "manylinux2010_x86_64",
    "manylinux2014_x86_64",
    *(f"manylinux_2_{minor}_x86_64" for minor in range(5, 40)),
)
NVIDIA_TOOLS = ("nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-runtime", "nvidia-container-runtime-hook")
# The modules the node runs; bundle.py itself runs here only.
NODE_MODULES = (
    "__init__",
    "check",
    "checkstate",
    "recorder",
    "carried",
    "nodefacts",
    "pyenv",
    "imagefs",
    "specsteps",
    "speccompare",
    "baseline",
    "containers",
    "gpuways",
    "bundledruntime",
    "timing",
)
LIMIT = 60 << 20
RUNTIME_TAR = "runtime/node-runtime.tar.xz"
# The runtime's cdictk modules, as its manifest names them.
RUNTIME_MODULE = re.compile(r"^lib/python3\.\d+/site-packages/(cdictk/.+\.py)$")
SCRIPT = '''#!/usr/bin/env python3
"""real-node-check: run as root on a GPU node (--help says what it does and writes)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from realnode.check import main  # noqa: E402

sys.exit(main())
'''


class BundleError(Exception):
    """Something the bundle needs is missing here: one line."""


@dataclass(frozen=True)
class Runtime:
    """The node runtime to carry: its tree, and the image that carries the same."""

    tree: Path
    image: str  # reference@digest


def image_runtime(image: Path) -> Runtime:
    """The node runtime in the image ``make image`` wrote to ``image`` (its cdictk layer's tree, where
    deploy/kubernetes/image-root.sh puts it), refused when its cdictk is not this clone's."""
    tree = image / "cdictk" / imageroot.layout().bundle.lstrip("/")
    if not (tree / "MANIFEST").is_file():
        raise BundleError(f"{image}: no node runtime at {tree} (make image builds it)")
    try:
        problem = stale(tree)
    except runtime_manifest.ManifestError as error:
        raise BundleError(f"{tree}: {error}") from None
    if problem is not None:
        raise BundleError(f"{tree}: {problem} (make image builds it anew)")
    try:
        found = read_image(image / "oci")
    except (OSError, ValueError, KeyError) as error:
        raise BundleError(f"{image / 'oci'}: no image layout beside the runtime ({error})") from None
    return Runtime(tree, f"{found.reference}@{found.digest}")


def stale(tree: Path, repo: Path = REPO) -> str | None:
    """Why the runtime at ``tree`` does not hold this clone's cdictk (a module more, less or changed
    since it was built), or None."""
    _, entries = runtime_manifest.read(str(tree))
    theirs = {match[1]: entry.sha256 for entry in entries if (match := RUNTIME_MODULE.match(entry.path))}
    ours = {
        path.relative_to(repo).as_posix(): runtime_manifest.file_sha256(str(path))
        for path in (repo / "cdictk").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    for name in sorted(theirs.keys() | ours.keys()):
        if theirs.get(name) != ours.get(name):
            how = "not in it" if name not in theirs else "gone here" if name not in ours else "changed here"
            return f"its cdictk is not this clone's: {name} {how}"
    return None


def pack_runtime(tree: Path, target: Path) -> dict[str, object]:
    """The runtime at ``tree`` as an xz-compressed tar at ``target`` (directories, files and hard
    links, as the image's layer holds them); what the manifest says of it."""
    text, entries = runtime_manifest.read(str(tree))
    # Times are nothing to the runtime (its bytecode is unchecked-hash): all 0, so that the same
    # runtime gives the same tar. xz's fastest preset: a fourth of the time of its default for 15%
    # more bytes, and the tests build a bundle every run.
    with lzma.open(target, "wb", preset=1) as packed:
        write_tar(tree, packed, epoch=0)
    return {
        "id": runtime_manifest.runtime_id(text),
        "bytes": sum((tree / entry.path).stat().st_size for entry in entries if entry.kind == "f"),
        "files": sum(entry.kind != "d" for entry in entries),
    }


def run(command: list[str], **kwargs: object) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise BundleError(f"{' '.join(command[:6])} ...: {(result.stderr or result.stdout).strip()[-800:]}")
    return str(result.stdout)


def find(name: str, *places: str) -> str:
    for place in (shutil.which(name), *places):
        if place and os.access(place, os.X_OK):
            return place
    raise BundleError(f"{name} not found (apt-get install {name}; tests/setup-host.sh installs it)")


def pack(source: str, target: Path) -> None:
    """``source`` xz-compressed at ``target``."""
    with open(source, "rb") as raw, lzma.open(target, "wb", preset=6) as packed:
        shutil.copyfileobj(raw, packed, 1 << 20)


def wheels(out: Path, pythons: list[str]) -> list[str]:
    """cdictk's wheel, its dependencies' for each Python, and pip's."""
    target = out / "wheels"
    target.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    run([*pip, "wheel", "--no-deps", "-w", str(target), str(REPO)])
    built = sorted(target.glob("cdictk-*.whl"))
    if not built:
        raise BundleError("pip wheel made no cdictk wheel")
    platforms = [word for platform in PLATFORMS for word in ("--platform", platform)]
    for version in pythons:
        run(
            [
                *pip, "download", "--only-binary=:all:", *platforms, "--python-version", version,
                "--implementation", "cp", "-d", str(target), str(built[0]), "pip",
            ]
        )  # fmt: skip
    return sorted(path.name for path in target.iterdir())


def build(out: Path, nvidia_tools: str | None, pythons: list[str], runtime: Runtime) -> dict[str, object]:
    if out.exists():
        shutil.rmtree(out)
    (out / "realnode").mkdir(parents=True)
    for name in ("bin", "lib", "src", "runtime"):
        (out / name).mkdir()
    for module in NODE_MODULES:
        shutil.copyfile(HERE / f"{module}.py", out / "realnode" / f"{module}.py")
    (out / "real-node-check").write_text(SCRIPT)
    (out / "real-node-check").chmod(0o755)
    shutil.copyfile(HERE / "cuda_check.cu", out / "src" / "cuda_check.cu")

    runc = find("runc", "/usr/sbin/runc")
    busybox = find("busybox", "/bin/busybox")
    if imagefs.interpreter(busybox) is not None:
        raise BundleError(f"{busybox} is dynamically linked: install busybox-static")
    gcc = find("gcc")
    run([gcc, "-O2", "-Wall", "-o", str(out / "bin" / "cuda-probe"), str(HERE / "cuda_probe.c"), "-ldl"])
    files: dict[str, str] = {
        "runc": "bin/runc.xz",
        "busybox": "bin/busybox.xz",
        "probe": "bin/cuda-probe",
        "cuda_source": "src/cuda_check.cu",
        "wheels": "wheels",
        "node_runtime": RUNTIME_TAR,
    }
    loader = imagefs.interpreter(runc)
    if loader is not None:
        listed, missing = imagefs.parse_list(run([loader, "--list", runc]))
        if missing:
            raise BundleError(f"{runc} needs {', '.join(missing)}, not found here")
        seccomp = [path for path in listed if os.path.basename(path) == "libseccomp.so.2"]
        if seccomp:
            shutil.copyfile(seccomp[0], out / "lib" / "libseccomp.so.2")
            files["libseccomp"] = "lib/libseccomp.so.2"
    to_pack = {runc: out / "bin" / "runc.xz", busybox: out / "bin" / "busybox.xz"}
    nvidia: dict[str, str] = {}
    if nvidia_tools:
        (out / "nvidia").mkdir()
        for name in NVIDIA_TOOLS:
            source = os.path.join(nvidia_tools, name)
            if os.access(source, os.X_OK):
                to_pack[source] = out / "nvidia" / f"{name}.xz"
                nvidia[name] = f"nvidia/{name}.xz"
        if "nvidia-ctk" not in nvidia or "nvidia-cdi-hook" not in nvidia:
            raise BundleError(f"{nvidia_tools} lacks nvidia-ctk or nvidia-cdi-hook")
    with ThreadPoolExecutor(max_workers=4) as pool:  # lzma lets go of the GIL
        packed_runtime = pool.submit(pack_runtime, runtime.tree, out / RUNTIME_TAR)
        for done in [pool.submit(functools.partial(pack, *item)) for item in to_pack.items()]:
            done.result()
        about_runtime = {**packed_runtime.result(), "image": runtime.image}
    wheel_names = wheels(out, pythons)
    commit = source_commit()
    manifest: dict[str, object] = {
        "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "pythons": pythons,
        "files": files,
        "nvidia": nvidia,
        "runc": run([runc, "--version"]).splitlines()[0],
        "busybox": busybox_version(busybox),
        "wheels": wheel_names,
        "node_runtime": about_runtime,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def source_commit() -> str:
    """The clone's commit for the manifest, or "unknown" where there is no git (a copied tree)."""
    try:
        described = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return described.stdout.strip() or "unknown"


def busybox_version(busybox: str) -> str:
    result = subprocess.run([busybox], capture_output=True, text=True, check=False)
    return (result.stdout or result.stderr).splitlines()[0] if (result.stdout or result.stderr) else "busybox"


def size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="the bundle's directory (replaced)")
    parser.add_argument(
        "--image",
        metavar="DIR",
        type=Path,
        default=REPO / "build" / "image",
        help="what make image wrote (default: build/image): the node runtime its image carries goes in",
    )
    parser.add_argument("--nvidia-tools", metavar="DIR", help="NVIDIA's built tools, to carry too")
    parser.add_argument(
        "--python-version",
        action="append",
        dest="pythons",
        metavar="X.Y",
        help=f"default: {' '.join(PYTHONS)}",
    )
    args = parser.parse_args()
    out = Path(args.out).resolve()
    try:
        runtime = image_runtime(args.image.resolve())
        build(out, args.nvidia_tools, args.pythons or list(PYTHONS), runtime)
    except BundleError as error:
        print(f"real-node-bundle: {error}", file=sys.stderr)
        return 1
    total = size(out)
    nvidia = size(out / "nvidia") if (out / "nvidia").exists() else 0
    carried = (out / RUNTIME_TAR).stat().st_size
    mib = 1 << 20
    print(
        f"real-node-bundle: {out}: {total / mib:.1f} MiB ({carried / mib:.1f} MiB of it the node runtime, "
        f"{nvidia / mib:.1f} MiB NVIDIA's tools)"
    )
    if total > LIMIT:
        print(f"real-node-bundle: over {LIMIT >> 20} MiB: the device tool cannot carry it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
