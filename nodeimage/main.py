"""The command line of ``python -m nodeimage build | tarball | lock``: the DaemonSet's image built here
(``make image``), its node runtime as the node tarball (``make node-tarball``), and the image's lock file
written anew."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nodeimage import ImageError, lockfile, makeimage, nodetarball

PROG = "python -m nodeimage"
ROOTFS_CACHE = Path(os.environ.get("CDICTK_ROOTFS_CACHE", "/var/cache/cdictk-tests/rootfs"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build cdictk's DaemonSet image as an OCI layout and archive, from a cached Debian root "
        "and without a registry or a container engine; its node runtime as a tarball for nodes without "
        "Kubernetes; or write its lock file anew.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    image = commands.add_parser(
        "build",
        help="build the image (as root: it runs deploy/kubernetes/image-root.sh in a chroot of the root)",
        description="Build the image into OUT: the OCI layout OUT/oci and its archive "
        "OUT/cdictk-VERSION.oci.tar, which ctr images import, podman load and skopeo copy oci-archive: take. "
        "Prints the archive and the image's reference and digest. The same clone, root and wheels give the "
        "same digest (times are SOURCE_DATE_EPOCH, else the last commit's).",
    )
    image.add_argument(
        "--rootfs",
        type=Path,
        default=ROOTFS_CACHE / "minbase-bookworm-python",
        metavar="DIR",
        help="the Debian root with python3 and python3-venv (default: the one tests/fetch-rootfs.sh CACHE "
        "bookworm-python caches, under $CDICTK_ROOTFS_CACHE or /var/cache/cdictk-tests/rootfs)",
    )
    image.add_argument(
        "--out", type=Path, default=Path("build/image"), metavar="DIR", help="default build/image"
    )
    image.add_argument(
        "--reference",
        metavar="NAME:TAG",
        help="the image's name (default: the image deploy/kubernetes/cdictk-daemonset.yaml runs)",
    )
    tarball = commands.add_parser(
        "tarball",
        help="the node runtime of the image built in IMAGE as the node tarball",
        description="Write OUT/cdictk-node-VERSION-ARCH.tar.gz: one directory, cdictk-node-VERSION, that is "
        "the node runtime the image built in IMAGE carries (build first). On a node: tar xzf it, then "
        "./cdictk-node-VERSION/bin/cdictk system install. Prints the tarball, the runtime's ID and the "
        "tarball's size in bytes. The same runtime gives the same bytes.",
    )
    tarball.add_argument(
        "--image", type=Path, default=Path("build/image"), metavar="IMAGE", help="default build/image"
    )
    tarball.add_argument("--out", type=Path, default=Path("build"), metavar="DIR", help="default build")
    lock = commands.add_parser(
        "lock",
        help=f"write {makeimage.LOCK.relative_to(makeimage.REPO)} anew from pyproject.toml (needs PyPI)",
        description="Resolve cdictk[kubernetes]'s requirements against PyPI for the image's Python and "
        "machines and write the lock file: exact versions and every wheel's hash.",
    )
    lock.add_argument(
        "--output", type=Path, default=makeimage.LOCK, metavar="FILE", help="default: %(default)s"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "lock":
            text = lockfile.lock(makeimage.REPO / "pyproject.toml")
            temp = args.output.with_name(f".{args.output.name}.tmp")
            temp.write_text(text, encoding="utf-8")
            os.replace(temp, args.output)
            print(args.output)
            return 0
        if args.command == "tarball":
            made = nodetarball.build(args.image, args.out)
            print(f"{made.path} {made.runtime_id} {made.size}")
            return 0
        if not args.rootfs.is_dir():
            raise ImageError(
                f"{args.rootfs}: no such directory (tests/fetch-rootfs.sh CACHE bookworm-python)"
            )
        built = makeimage.build(args.rootfs, args.out, args.reference)
    except ImageError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 1
    print(f"{built.archive}\n{built.reference}@{built.digest}")
    return 0
