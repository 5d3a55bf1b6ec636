"""The hook's ld cache on real images of every glibc release it claims, against each image's own
ldconfig (slow: ``make test-slow``; tests/fetch-rootfs.sh builds the images once).

Debian 11 (glibc 2.31), Ubuntu 22.04 (2.35), Debian 12 (2.36), Ubuntu 24.04 (2.39) and Debian 13
(2.41), minbase plus a few libraries, each with the fake node's driver libraries laid out three ways:
in the multiarch directory (the one-GPU node's spec), in ``/usr/local/nvidia/lib64``, which the image's
own ``/etc/ld.so.conf.d/nvidia.conf`` names as CUDA images' does (the GKE node's spec), and with a CUDA
forward-compatibility libcuda in ``/usr/local/cuda/compat``. Each image also holds what ldconfig
changes or reads differently by release: a dangling ``.so.`` link (removed) and one without ``.so.``
(kept), a link that dangles until ldconfig remakes a SONAME link, a link into the driver's directory
from a directory scanned later, and one SONAME in two directories whose ABI notes say Linux 99.0.0 and
2.6.32 (glibc 2.35 and older store the note, sort by it and skip a library for a newer kernel).

For each image and layout:

- two overlays get the same files and the spec's links; the hook's update-ldcache step writes the
  cache of one, the image's own ldconfig (in a chroot) the cache of the other, and the two must hold
  the same bytes, and the same links, files and removals (compared in the overlays' upper dirs);
- the generated spec runs in a runc container on a third overlay, and the image's own perl
  (DynaLoader, which perl-base has in every minbase) dlopens every driver SONAME of the spec's
  library folders: each must load from the file the spec mounts (libcuda from the compat folder in
  that layout), and the tagged SONAME from the directory the image's own loader would pick. (The fake
  NVML library, built against this host's glibc, is found but refused by older loaders for its symbol
  versions; the error names the file it found, which is what is checked there.)
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdictk.elflinks import read_soname
from cdictk.startpath.helpers.rootfs import Rootfs
from cdictk.startpath.hooks.cudacompat import enable_cuda_compat
from cdictk.startpath.hooks.ldcache import update_ldcache
from tests.conftest import node_with_spec
from tests.e2e.conftest import Runtime, fetch_minbase, overlay, require_tool
from tests.e2e.test_hooks import gpu_bundle, links_of, option_values, run_ok, set_script
from tests.e2e.test_hooks_cuda_compat import COMPAT_DIR, HOST_DRIVER, NEWER, add_compat_libcuda, compat_note
from tests.fakenode.node import FakeNode
from tests.unit.startpath.helpers.test_elfdso import NOTES_C

pytestmark = [pytest.mark.slow, pytest.mark.root]

# Each release and its glibc: the loader of 2.35 and older skips a library tagged for a newer kernel.
RELEASES = {"bullseye": 31, "jammy": 35, "bookworm": 36, "noble": 39, "trixie": 41}
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
NVIDIA_CONF = "/etc/ld.so.conf.d/nvidia.conf"
TAGGED = "libtagged.so.1"
# Directories the images' ld.so.conf.d names, read in this order: /usr/local/lib (libc.conf) first.
LOCAL, LOCAL_MULTIARCH = "/usr/local/lib", "/usr/local/lib/x86_64-linux-gnu"
AUX_CACHE = "var/cache/ldconfig/aux-cache"  # ldconfig's own, not the loader's: written by ldconfig only
PROBE = r"""
require DynaLoader;
sub maps {
    open(my $m, "<", "/proc/self/maps") or die "maps: $!";
    my %p;
    while (<$m>) { my @f = split; $p{$f[5]} = 1 if @f > 5 && $f[5] =~ m{^/}; }
    return %p;
}
my %before = maps();
for my $name (@ARGV) {
    if (!DynaLoader::dl_load_file($name, 0)) { print "FAIL $name ", DynaLoader::dl_error(), "\n"; next; }
    my %now = maps();
    print "OK $name ", join(" ", grep { !$before{$_} } sort keys %now), "\n";
    %before = %now;
}
print "END\n";
"""


@dataclass(frozen=True)
class Layout:
    name: str
    preset: str  # the fake node whose spec mounts the driver: "single" (multiarch) or "gke"
    lib_dir: str  # where that spec mounts the driver's libraries
    image: Callable[[Path, Path], None]  # what the image ships beside them (rootfs, scratch dir)


def _nvidia_conf(root: Path, _: Path) -> None:
    conf = root / NVIDIA_CONF.lstrip("/")
    conf.write_text("/usr/local/nvidia/lib\n/usr/local/nvidia/lib64\n")


def _compat(root: Path, scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    add_compat_libcuda(root, NEWER, compat_note("13.1", [535, 550, 570, 575, 580]), scratch / "gcc")


LAYOUTS = {
    layout.name: layout
    for layout in (
        Layout("multiarch", "single", MULTIARCH, lambda root, scratch: None),
        Layout("conf.d", "gke", "/usr/local/nvidia/lib64", _nvidia_conf),
        Layout("cuda-compat", "single", MULTIARCH, _compat),
    )
}


@pytest.fixture(scope="session")
def images() -> dict[str, Path | str]:
    if os.uname().machine != "x86_64":
        pytest.skip("the releases' images and their multiarch paths are x86-64's here")
    return fetch_minbase(*RELEASES)


@pytest.fixture(params=list(RELEASES))
def image(request: pytest.FixtureRequest, images: dict[str, Path | str]) -> tuple[str, Path]:
    found = images[request.param]
    if isinstance(found, str):
        print(found)
        pytest.skip(found)
    return request.param, found


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> dict[str, tuple[FakeNode, Path]]:
    """The fake nodes and their generated specs, by preset."""
    return {
        preset: node_with_spec(tmp_path_factory, stub_cache, f"rel-{preset}", preset)
        for preset in ("single", "gke")
    }


@pytest.fixture(scope="module")
def tagged_libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """libtagged.so.1 twice: tagged Linux 99.0.0 (for /usr/local/lib) and 2.6.32 (for the multiarch one)."""
    require_tool("gcc")
    out = tmp_path_factory.mktemp("tagged")
    built = {}
    for directory, tag in ((LOCAL, (0, 99, 0, 0)), (LOCAL_MULTIARCH, (0, 2, 6, 32))):
        source = out / f"{tag[1]}.c"
        source.write_text(NOTES_C.format(*tag))
        library = out / f"{tag[1]}" / TAGGED
        library.parent.mkdir()
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{TAGGED}", "-o", library, source], check=True
        )
        built[directory] = library
    return built


def _image_files(root: Path, layout: Layout, scratch: Path, tagged: dict[str, Path]) -> None:
    """What the image ships: the layout's files and what ldconfig changes or reads by release."""
    layout.image(root, scratch)
    lib = root / MULTIARCH.lstrip("/")
    (lib / "libgone.so.1").symlink_to("libnothere.so.1.0")  # dangling: removed
    (lib / "libgone.so").symlink_to("libnothere.so")  # dangling, but no ".so.": kept
    # The SONAME link gone (a package's files copied without it): ldconfig remakes it, after it has
    # removed the alias that dangled when it read the directory.
    numa = (lib / "libnuma.so.1").resolve().name
    (lib / "libnuma.so.1").unlink()
    (lib / "libnuma-alias.so.1").symlink_to("libnuma.so.1")
    assert (lib / numa).is_file()
    for directory, library in tagged.items():
        (root / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, root / directory.lstrip("/") / TAGGED)
    # Scanned after the driver's directory: its SONAME link is there by then.
    (root / LOCAL.lstrip("/") / "libcuda-alias.so.1").symlink_to(f"{layout.lib_dir}/libcuda.so.1")


def _injected(spec_dir: Path, rootfs: Path, scratch: Path) -> dict[str, Any]:
    bundle, _ = gpu_bundle(scratch / "bundle", rootfs, spec_dir)
    config: dict[str, Any] = json.loads((bundle / "config.json").read_text())
    return config


def _driver_files(config: dict[str, Any], root: Path) -> dict[str, str]:
    """Copy the spec's library files where it mounts them, as the runtime would bind them; returns
    SONAME -> the container path of the file, for those in the hook's library folders."""
    folders = set(option_values(config["hooks"]["createContainer"], "folder"))
    libraries = {}
    for mount in config["mounts"]:
        source, destination = Path(mount.get("source", "")), mount["destination"]
        if not source.is_file() or ".so" not in source.name or not destination.startswith("/usr/"):
            continue
        target = root / destination.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        soname = read_soname(str(source))
        if soname is not None and os.path.dirname(destination) in folders:
            libraries[soname] = destination
    return libraries


def _upper(upper: Path) -> dict[str, tuple[Any, ...]]:
    """What an overlay's upper dir says changed: files (mode, bytes), links (target), removals."""
    changes: dict[str, tuple[Any, ...]] = {}
    for folder, _, names in os.walk(upper):
        for name in names:
            path = Path(folder, name)
            info = path.lstat()
            relative = str(path.relative_to(upper))
            if stat.S_ISLNK(info.st_mode):
                changes[relative] = ("link", os.readlink(path))
            elif stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                changes[relative] = ("removed",)
            elif stat.S_ISREG(info.st_mode):
                changes[relative] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return changes


@pytest.fixture
def overlays(image: tuple[str, Path], tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """(the release, the rootfs the hook indexes, the one the image's ldconfig indexes)."""
    with overlay(image[1], tmp_path / "ours") as ours, overlay(image[1], tmp_path / "theirs") as theirs:
        yield image[0], ours, theirs


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_hook_writes_what_the_images_own_ldconfig_writes(
    overlays: tuple[str, Path, Path],
    layout: str,
    nodes: dict[str, tuple[FakeNode, Path]],
    tagged_libraries: dict[str, Path],
    tmp_path: Path,
) -> None:
    chosen = LAYOUTS[layout]
    suite, ours, theirs = overlays
    node, spec_dir = nodes[chosen.preset]
    config = _injected(spec_dir, ours, tmp_path)
    hooks = config["hooks"]["createContainer"]
    folders = option_values(hooks, "folder")
    for number, root in enumerate((ours, theirs)):
        _image_files(root, chosen, tmp_path / f"image-{number}", tagged_libraries)
        _driver_files(config, root)
        with Rootfs(str(root)) as rootfs:
            rootfs.symlinks(
                [(target, link) for target, link in links_of(hooks) if not link.startswith("/dev/")]
            )
            enable_cuda_compat(rootfs, node.version)
    with Rootfs(str(ours)) as rootfs:
        update_ldcache(rootfs, folders)
    # The image's ldconfig reads the same configuration: the hook's drop-ins, copied.
    for conf in sorted((ours / "etc/ld.so.conf.d").glob("*cdictk*")):
        shutil.copy2(conf, theirs / "etc/ld.so.conf.d" / conf.name)
    indexed = subprocess.run(
        ["chroot", str(theirs), "/sbin/ldconfig"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
        check=False,
    )
    assert indexed.returncode == 0, f"{suite}'s ldconfig: {indexed.stderr}"
    ours_changed = _upper(ours.parent / "upper")
    theirs_changed = _upper(theirs.parent / "upper")
    theirs_changed.pop(AUX_CACHE, None)
    cache = "etc/ld.so.cache"
    assert ours_changed.pop(cache) == theirs_changed.pop(cache), f"{suite}, {layout}: the caches differ"
    assert ours_changed == theirs_changed
    # The test's own links live in the upper dirs: one removed is simply gone from them.
    lib = MULTIARCH.lstrip("/")
    assert f"{lib}/libgone.so.1" not in ours_changed and f"{lib}/libnuma-alias.so.1" not in ours_changed
    assert ours_changed[f"{lib}/libgone.so"] == ("link", "libnothere.so")
    assert ours_changed[f"{lib}/libnuma.so.1"][0] == "link"


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_driver_soname_loads_in_the_container(
    image: tuple[str, Path],
    layout: str,
    nodes: dict[str, tuple[FakeNode, Path]],
    tagged_libraries: dict[str, Path],
    tmp_path: Path,
) -> None:
    chosen = LAYOUTS[layout]
    suite, lower = image
    runc = Runtime("runc", require_tool("runc"), tmp_path / "runc-state")
    _, spec_dir = nodes[chosen.preset]
    with overlay(lower, tmp_path / "overlay") as root:
        _image_files(root, chosen, tmp_path / "image", tagged_libraries)
        bundle, _ = gpu_bundle(tmp_path / "bundle", root, spec_dir)
        config = json.loads((bundle / "config.json").read_text())
        expected = _driver_files(config, tmp_path / "unused")
        if layout == "cuda-compat":
            expected["libcuda.so.1"] = f"{COMPAT_DIR}/libcuda.so.{NEWER}"
        # The loader of glibc 2.35 and older skips the 99.0.0 library that the cache lists first.
        expected[TAGGED] = f"{LOCAL_MULTIARCH if RELEASES[suite] <= 35 else LOCAL}/{TAGGED}"
        probe = root / "probe.pl"
        probe.write_text(PROBE)
        set_script(bundle, "perl /probe.pl " + " ".join(sorted(expected)))
        out = run_ok(runc, bundle)
    assert out.rstrip().endswith("END"), out
    loaded = {}
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        name, _, paths = rest.partition(" ")
        if word == "OK":
            loaded[name] = paths.split()
        elif word == "FAIL":
            loaded[name] = [f"FAIL {paths}"]
            # The fake NVML library is built against this host's glibc: an older image's loader finds
            # it (through the cache, at its SONAME link) and then refuses its symbol versions.
            found = f"(required by {os.path.dirname(expected.get(name, ''))}/{name})"
            if "version `GLIBC_2." in paths and found in paths:
                loaded[name].append(expected[name])
    wrong = {name: loaded.get(name) for name, path in expected.items() if path not in loaded.get(name, [])}
    assert wrong == {}, f"{suite}, {layout} (glibc 2.{RELEASES[suite]}), host driver {HOST_DRIVER}:\n{out}"
