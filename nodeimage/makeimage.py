"""``python -m nodeimage build``: the DaemonSet's image from the cached Debian root, as an OCI layout and
one archive of it, with no registry and no container engine.

In OUT (``build/image`` for ``make image``):

- ``wheels/``: the wheels the lock pins, fetched once and kept (pip checks their hashes);
- ``context/``: what image-root.sh installs (cdictk's wheel built from this clone, the pinned wheels,
  the lock, the node runtime's launcher compiled here, the init container's script, the script itself);
- ``cdictk/``: what the script added to the root, which is the image's second layer as it is;
- ``oci/``: the OCI layout; ``cdictk-VERSION.oci.tar``: the archive that ``ctr images import``,
  ``podman load``, ``docker load`` and ``skopeo copy oci-archive:`` take.

Two layers: the Debian root (less what a runtime provides and what apt and dpkg leave behind) and
cdictk's, so that a new cdictk ships the second alone. Every time in them is clamped to the source's
epoch: ``SOURCE_DATE_EPOCH`` if set, else the time of the clone's last commit. So the same clone, root
and wheels give the same image digest.
"""

from __future__ import annotations

import ast
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodeimage import ImageError, imageroot, lockfile
from nodeimage.ocilayout import ImageSettings, blob_path, write_archive, write_layout
from nodeimage.tarlayer import Layer, Prune, write_layer

REPO = Path(__file__).resolve().parent.parent
KUBERNETES = REPO / "deploy" / "kubernetes"
LOCK = KUBERNETES / "requirements.lock"
INIT_SCRIPT = KUBERNETES / "cdictk-node-setup.sh"
MANIFEST = KUBERNETES / "cdictk-daemonset.yaml"
# What cdictk's wheel is built from: its schema, proto files and units are package data under cdictk/.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "cdictk")
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class Built:
    reference: str
    digest: str  # the manifest's: the image's digest in a registry and in `ctr images ls`
    layout: Path
    archive: Path


def source_epoch(repo: Path = REPO) -> int:
    """``SOURCE_DATE_EPOCH``, else the committer time of the clone's HEAD, else (a copy without git,
    such as a release's tarball) the newest time among the files the wheel is built from."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given is not None:
        if not given.isdigit():
            raise ImageError(f"SOURCE_DATE_EPOCH={given!r}: want seconds since 1970")
        return int(given)
    if (repo / ".git").exists():
        try:
            done = subprocess.run(
                ["git", "-C", str(repo), "log", "-1", "--format=%ct"],
                capture_output=True,
                text=True,
                check=False,
            )
        except FileNotFoundError:
            raise ImageError(f"{repo}: a git clone, and no git here: set SOURCE_DATE_EPOCH") from None
        if done.returncode != 0 or not done.stdout.strip().isdigit():
            raise ImageError(f"git log in {repo} gave no commit time: set SOURCE_DATE_EPOCH")
        return int(done.stdout)
    times = [int(os.lstat(repo / name).st_mtime) for name in _tracked(repo, WHEEL_SOURCES)]
    if not times:
        raise ImageError(f"{repo}: none of {', '.join(WHEEL_SOURCES)} is there")
    return max(times)


def project(repo: Path = REPO) -> dict[str, str]:
    """The name, version, description and license of the wheel ``repo`` builds."""
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    about = {key: str(pyproject["project"][key]) for key in ("name", "description", "license")}
    return {**about, "version": version(repo, pyproject)}


def version(repo: Path, pyproject: dict[str, Any]) -> str:
    """The version pyproject.toml takes from a module's attribute ([tool.setuptools.dynamic]), read
    from that module's source as setuptools reads it: a string literal assigned at the top level."""
    attr = pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    base = repo.joinpath(*module.split("."))
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
    raise ImageError(f'{source}: no {name} = "VERSION" of its own (pyproject.toml\'s version is {attr})')


def manifest_reference(manifest: Path = MANIFEST) -> str:
    """The image every container of the DaemonSet runs: the name the built image gets."""
    with manifest.open(encoding="utf-8") as handle:
        documents = [doc for doc in yaml.safe_load_all(handle) if isinstance(doc, dict)]
    images = {
        container["image"]
        for doc in documents
        if doc.get("kind") == "DaemonSet"
        for key in ("initContainers", "containers")
        for container in doc["spec"]["template"]["spec"].get(key, [])
    }
    if len(images) != 1:
        raise ImageError(f"{manifest}: its containers name {len(images)} images, want one")
    return str(images.pop())


def machine() -> str:
    name = platform.machine()
    if name not in GOARCH:
        raise ImageError(f"{name}: the image is built for {', '.join(GOARCH)} only")
    return name


def _tracked(repo: Path, paths: Sequence[str]) -> list[str]:
    """The files under ``paths`` that git knows or would add (none of its ignored ones: caches, builds);
    in a copy without git, every file but bytecode and build metadata."""
    if not (repo / ".git").exists():
        return sorted(name for top in paths for name in _walk(repo, top))
    command = ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    done = subprocess.run([*command, "--", *paths], capture_output=True, check=False)
    if done.returncode != 0:
        raise ImageError(f"git ls-files in {repo} failed: {done.stderr.decode(errors='replace').strip()}")
    listed = {name for name in done.stdout.decode().split("\0") if name}
    return sorted(name for name in listed if os.path.lexists(repo / name))


def _walk(repo: Path, top: str) -> list[str]:
    if not (repo / top).is_dir() or (repo / top).is_symlink():
        return [top] if os.path.lexists(repo / top) else []
    found = []
    for directory, subdirectories, files in os.walk(repo / top):
        # A link to a directory is copied as the link it is.
        links = [name for name in subdirectories if os.path.islink(os.path.join(directory, name))]
        skipped = {"__pycache__", *links}
        subdirectories[:] = [d for d in subdirectories if d not in skipped and not d.endswith(".egg-info")]
        found += [
            os.path.relpath(os.path.join(directory, name), repo)
            for name in [*files, *links]
            if not name.endswith(".pyc")
        ]
    return found


def build_wheel(repo: Path, destination: Path, epoch: int) -> Path:
    """cdictk's wheel from the clone's own files (not what a build directory kept) into ``destination``."""
    with tempfile.TemporaryDirectory(prefix="cdictk-wheel-") as work:
        source = Path(work) / "src"
        for name in _tracked(repo, WHEEL_SOURCES):
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, target, follow_symlinks=False)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--wheel-dir",
                str(destination),
                str(source),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=600,
        )
    if done.returncode != 0:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        raise ImageError(f"pip wheel of cdictk failed: {last}")
    (wheel,) = destination.glob("cdictk-*.whl")
    return wheel


def compile_launcher(output: Path) -> None:
    """The node runtime's launcher, compiled here (gcc -static) from cdictk's source."""
    from cdictk.noderuntime.launcher import LauncherError  # noqa: PLC0415
    from cdictk.noderuntime.launcher import compile_launcher as compile_it  # noqa: PLC0415

    try:
        compile_it(str(output))
    except LauncherError as exc:
        raise ImageError(str(exc)) from None


def prepare_context(repo: Path, out: Path, arch: str, epoch: int) -> Path:
    """``out/context``, made anew: everything image-root.sh installs, the script included."""
    context = out / "context"
    if context.exists():
        shutil.rmtree(context)
    (context / "wheels").mkdir(parents=True)
    cache = out / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    pins = lockfile.parse(LOCK.read_text(encoding="utf-8"))
    # PyPI only when the cache lacks a pinned wheel: a build again runs offline.
    wheels = lockfile.from_cache(pins, cache, arch)
    if wheels is None:
        lockfile.download(LOCK, cache, arch)
        wheels = lockfile.from_cache(pins, cache, arch)
    if wheels is None:
        raise ImageError(f"pip download left a wheel {LOCK.name} pins for {arch} out of {cache}")
    for wheel in wheels:
        os.link(wheel, context / "wheels" / wheel.name)
    build_wheel(repo, context / "wheels", epoch)
    compile_launcher(context / "launcher")
    shutil.copyfile(LOCK, context / "requirements.lock")
    shutil.copyfile(INIT_SCRIPT, context / "cdictk-node-setup.sh")
    shutil.copyfile(imageroot.SCRIPT, context / "image-root.sh")
    return context


def image_settings(arch: str, base_name: str, repo: Path = REPO) -> ImageSettings:
    about = project(repo)
    paths = imageroot.layout()
    return ImageSettings(
        architecture=GOARCH[arch],
        entrypoint=[f"{paths.venv}/bin/cdictk"],
        # A read-only root file system in the pods: no bytecode written at run time.
        env=[f"PATH={paths.venv}/bin:{SYSTEM_PATH}", "PYTHONDONTWRITEBYTECODE=1"],
        history=[
            f"the Debian root {base_name} (tests/fetch-rootfs.sh), less what apt, dpkg and debootstrap leave",
            f"deploy/kubernetes/image-root.sh: {about['name']} {about['version']} and its node runtime",
        ],
        labels={
            "org.opencontainers.image.title": about["name"],
            "org.opencontainers.image.version": about["version"],
            "org.opencontainers.image.description": about["description"],
            "org.opencontainers.image.licenses": about["license"],
        },
    )


def assemble(
    trees: Sequence[tuple[Path, Prune]],
    settings: ImageSettings,
    *,
    reference: str,
    epoch: int,
    out: Path,
    archive: Path,
) -> str:
    """The layout at ``out`` (replaced whole) with one layer per tree, and its archive; the digest."""
    temp = out.with_name(f".{out.name}.tmp")
    if temp.exists():
        shutil.rmtree(temp)
    (temp / "blobs" / "sha256").mkdir(parents=True)

    def one(index: int) -> Layer:
        root, prune = trees[index]
        partial = temp / "blobs" / f"layer-{index}.partial"
        layer = write_layer(root, partial, epoch=epoch, prune=prune)
        os.replace(partial, blob_path(temp, layer.digest))
        return layer

    # zlib lets go of the GIL: the layers compress side by side.
    with ThreadPoolExecutor(max_workers=len(trees)) as pool:
        layers = list(pool.map(one, range(len(trees))))
    manifest = write_layout(temp, layers, settings, reference, epoch)
    if out.exists():
        shutil.rmtree(out)
    os.replace(temp, out)
    write_archive(out, archive, epoch)
    return manifest.digest


def build(rootfs: Path, out: Path, reference: str | None = None, repo: Path = REPO) -> Built:
    arch = machine()
    epoch = source_epoch(repo)
    reference = reference or manifest_reference()
    out.mkdir(parents=True, exist_ok=True)
    context = prepare_context(repo, out, arch, epoch)
    staged = out / "cdictk"
    imageroot.stage(rootfs, context, staged)
    version = project(repo)["version"]
    archive = out / f"cdictk-{version}.oci.tar"
    trees = [(rootfs, imageroot.BASE_PRUNE), (staged, Prune())]
    settings = image_settings(arch, rootfs.name, repo)
    digest = assemble(trees, settings, reference=reference, epoch=epoch, out=out / "oci", archive=archive)
    return Built(reference, digest, out / "oci", archive)
