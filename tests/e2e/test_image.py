"""`make image`'s image, as the engines take it (slow: ``make test-slow``; CI builds the image once
with ``make image`` and names it in ``CDICTK_IMAGE_DIR``).

containerd 2.x and Debian 12's 1.6 (``ctr -n k8s.io images import``, where the kubelet's images
are), podman and dockerd 28 (``load``) each take the archive under the DaemonSet's image name with the
digest make image printed, and run cdictk from it with a read-only root file system, the device
plugin's libraries and the node runtime included. Building cdictk's part again from the same inputs gives the same layer,
and the Debian root the same base layer: the same image digest. And the image holds what the
DaemonSet needs and none of the noise a build leaves.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeimage import imageroot, makeimage
from nodeimage.ocilayout import read_image
from nodeimage.tarlayer import Prune, entries, write_tar
from tests.e2e.conftest import Podman, fetch_minbase
from tests.e2e.daemons import (
    Containerd,
    containerd_daemon,
    containerd_major,
    distro_containerd_dir,
    dockerd_daemon,
    sid_containerd_dir,
)

pytestmark = [pytest.mark.slow, pytest.mark.root]

VERSION_LINE = f"cdictk, version {makeimage.project()['version']}\n"
# What the device plugin container imports, and PyYAML's C loader, which the spec's parsing wants.
TIME = "%Y-%m-%dT%H:%M:%SZ"  # the config's "created"
PLUGIN_IMPORTS = (
    "import grpc, google.protobuf, yaml, cdictk.deviceplugin.plugin; print(yaml.__with_libyaml__)"
)


class _Digest(io.RawIOBase):
    def __init__(self) -> None:
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        return len(data)


def diff_id(root: Path, prune: Prune, epoch: int) -> str:
    """The diff ID a layer of ``root`` has: its tar's digest (gzip is no part of it)."""
    digest = _Digest()
    write_tar(root, digest, epoch=epoch, prune=prune)
    return f"sha256:{digest.sha.hexdigest()}"


@pytest.fixture(scope="module")
def k8s_containerd(node_image: makeimage.Built) -> Iterator[Containerd]:
    with containerd_daemon(sid_containerd_dir(), "version = 3\n") as daemon:
        daemon.namespace = "k8s.io"
        daemon.import_image(node_image.archive)
        yield daemon


def test_containerd_imports_it_under_the_daemonsets_name_and_digest(
    node_image: makeimage.Built, k8s_containerd: Containerd
) -> None:
    assert node_image.reference == makeimage.manifest_reference()
    listed = k8s_containerd.ctr("images", "ls").stdout
    row = next(line.split() for line in listed.splitlines() if line.startswith(f"{node_image.reference} "))
    assert row[2] == node_image.digest
    assert row[-2] == f"linux/{read_image(node_image.layout).config['architecture']}"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ([], VERSION_LINE),  # the entrypoint: cdictk in the venv
        (["python3", "-c", PLUGIN_IMPORTS], "True\n"),
        (["/usr/local/share/cdictk/node-runtime/bin/cdictk", "--version"], VERSION_LINE),
    ],
    ids=["entrypoint", "device-plugin-imports", "node-runtime"],
)
def test_containerd_runs_cdictk_from_it_on_a_read_only_root(
    node_image: makeimage.Built, k8s_containerd: Containerd, command: list[str], expected: str
) -> None:
    venv = imageroot.layout().venv
    argv = command or [f"{venv}/bin/cdictk", "--version"]
    ran = k8s_containerd.run(node_image.reference, argv, options=["--read-only"])
    assert (ran.returncode, ran.stdout) == (0, expected), ran.stderr
    assert imageroot.layout().bundle == "/usr/local/share/cdictk/node-runtime"


def test_containerd_1_6_imports_and_runs_it_too(node_image: makeimage.Built) -> None:
    """Debian 12's containerd, as many nodes still run: the same name, digest and cdictk."""
    with containerd_daemon(distro_containerd_dir(), "version = 2\n") as daemon:
        daemon.namespace = "k8s.io"
        daemon.import_image(node_image.archive)
        assert containerd_major(daemon.binary_dir) == 1
        listed = daemon.ctr("images", "ls").stdout
        row = next(
            line.split() for line in listed.splitlines() if line.startswith(f"{node_image.reference} ")
        )
        assert row[2] == node_image.digest
        ran = daemon.run(node_image.reference, ["cdictk", "--version"], options=["--read-only"])
        assert (ran.returncode, ran.stdout) == (0, VERSION_LINE), ran.stderr


def test_podman_loads_it_with_the_same_digest_and_runs_it(
    node_image: makeimage.Built, podman: Podman
) -> None:
    loaded = podman("load", "--input", str(node_image.archive))
    assert loaded.returncode == 0, loaded.stderr.decode()
    assert f"Loaded image: {node_image.reference}" in loaded.stdout.decode()
    try:
        inspected = podman("image", "inspect", "--format", "{{.Digest}}", node_image.reference)
        assert inspected.stdout.decode().strip() == node_image.digest
        ran = podman("run", "--rm", "--read-only", "--network", "none", node_image.reference, "--version")
        assert (ran.returncode, ran.stdout.decode()) == (0, VERSION_LINE), ran.stderr.decode()
    finally:
        podman("rmi", "--force", node_image.reference)


def test_dockerd_loads_it_and_runs_it(node_image: makeimage.Built) -> None:
    config = read_image(node_image.layout).manifest["config"]["digest"]
    with dockerd_daemon() as docker:
        docker.load_image(node_image.archive)
        inspected = json.loads(docker.api("GET", f"/images/{node_image.reference}/json"))
        # The classic store names an image by its config's digest, the containerd store by its manifest's.
        assert inspected["Id"] in (config, node_image.digest)
        ran = docker.run(node_image.reference, ["--version"], host_config={"ReadonlyRootfs": True})
        assert (ran.returncode, ran.stdout) == (0, VERSION_LINE), ran.stderr


def test_the_same_inputs_give_the_same_layers(node_image: makeimage.Built, tmp_path: Path) -> None:
    """cdictk's part made again by image-root.sh from the build's context, and the base layer's tar
    again from the cached root, have the diff IDs in the image's config: the same image."""
    found = fetch_minbase("bookworm-python")["bookworm-python"]
    assert isinstance(found, Path), found
    out = node_image.layout.parent
    image = read_image(node_image.layout)
    epoch = int(
        datetime.datetime.strptime(image.config["created"], TIME).replace(tzinfo=datetime.UTC).timestamp()
    )
    staged = tmp_path / "cdictk"
    imageroot.stage(found, out / "context", staged)
    assert image.config["rootfs"]["diff_ids"] == [
        diff_id(found, imageroot.BASE_PRUNE, epoch),
        diff_id(staged, Prune(), epoch),
    ]


def test_the_image_holds_what_the_daemonset_runs_and_no_build_noise(node_image: makeimage.Built) -> None:
    found = fetch_minbase("bookworm-python")["bookworm-python"]
    assert isinstance(found, Path), found
    paths = imageroot.layout()
    staged = node_image.layout.parent / "cdictk"
    added = dict(entries(staged))
    # image-root.sh adds below /usr/local alone: no cache, log or temp file of pip's or Python's.
    assert {name.split("/")[0] for name in added} == {"usr"}
    assert {"/".join(name.split("/")[:3]) for name in added} == {
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/lib",
        "usr/local/share",
    }
    for path in (
        f"{paths.venv}/bin/cdictk",
        f"{paths.bundle}/MANIFEST",
        f"{paths.bundle}/bin/cdictk-hook",
        paths.init,
    ):
        assert path.lstrip("/") in added, path
    assert added[paths.init.lstrip("/")].st_mode & 0o777 == 0o755
    # Bytecode is hash-based and never checked against its source: no time in it, nothing to stat.
    pycs = [name for name in added if name.endswith(".pyc")]
    assert pycs
    for name in pycs:
        header = (staged / name).read_bytes()[:8]
        assert int.from_bytes(header[4:8], "little") == 1, name
    base = [name for name, _ in entries(found, imageroot.BASE_PRUNE)]
    assert not [
        name
        for name in base
        if name.startswith(("var/log/", "var/lib/apt/lists/", "var/cache/apt/", "dev/", "tmp/"))
    ]
    assert "etc/hostname" not in base and "etc/resolv.conf" not in base
    assert "usr/share/python-wheels" in base  # the pip image-root.sh runs, from Debian's package
