"""The image's two trees: the Debian root as the tests cache it, and what image-root.sh adds to it.

``deploy/kubernetes/image-root.sh`` runs inside the root, as the Containerfile's RUN step runs it:
here in a chroot of an overlay whose lower layer is the cached root (never written) and whose upper
directory collects what the script writes, which is then the image's cdictk layer as it is. The
overlay, /proc, the machine's /dev, a tmpfs /tmp and the context (read-only, at
``/tmp/cdictk-image``) are mounted in a mount namespace of their own, so they are gone when the script
ends, however it ends.

What of the cached root the base layer leaves out: what a runtime provides (/dev, /proc, /sys; the
machine's hostname and resolver that debootstrap copied in), apt's package lists and caches, logs,
and the backups dpkg, debconf and shadow's tools keep (``*-old``, ``passwd-``).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nodeimage import ImageError
from nodeimage.tarlayer import Prune, entries

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "deploy" / "kubernetes" / "image-root.sh"
# In the image's root, on a tmpfs of the script's own: the Containerfile mounts it there too.
CONTEXT_IN_ROOT = "/tmp/cdictk-image"  # noqa: S108
# The script's environment: nothing of this machine's but a plain PATH.
ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C.UTF-8")
BASE_PRUNE = Prune(
    emptied=frozenset(
        {"dev", "proc", "sys", "tmp", "var/log", "var/cache/apt", "var/lib/apt/lists", "var/cache/ldconfig"}
    ),
    omitted=frozenset(
        {
            ".cdictk-rootfs",  # tests/fetch-rootfs.sh's recipe stamp
            "etc/hostname",
            "etc/resolv.conf",
            "etc/passwd-",
            "etc/group-",
            "etc/shadow-",
            "etc/gshadow-",
            "etc/subuid-",
            "etc/subgid-",
            "var/cache/debconf/config.dat-old",
            "var/cache/debconf/templates.dat-old",
            "var/lib/dpkg/status-old",
            "var/lib/dpkg/diversions-old",
        }
    ),
)
# Mount the overlay and what the script needs, then chroot: $1 lower, $2 upper, $3 overlay work
# directory, $4 mount point, $5 context; the rest is the environment.
_IN_NAMESPACE = f"""\
set -eu
lower=$1 upper=$2 work=$3 merged=$4 context=$5
shift 5
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$merged"
mount -t proc proc "$merged/proc"
mount --rbind /dev "$merged/dev"
mount -t tmpfs -o mode=1777 tmpfs "$merged/tmp"
mkdir "$merged{CONTEXT_IN_ROOT}"
mount --bind "$context" "$merged{CONTEXT_IN_ROOT}"
mount -o remount,bind,ro "$merged{CONTEXT_IN_ROOT}"
exec chroot "$merged" /usr/bin/env -i "$@" /bin/sh {CONTEXT_IN_ROOT}/image-root.sh {CONTEXT_IN_ROOT}
"""
_TIMEOUT = 1200


@dataclass(frozen=True, slots=True)
class Layout:
    """Where image-root.sh puts cdictk's parts in the image, as the script itself says."""

    venv: str
    bundle: str
    init: str


def layout(script: Path = SCRIPT) -> Layout:
    text = script.read_text(encoding="utf-8")
    found = {}
    for name in ("VENV", "BUNDLE", "INIT"):
        match = re.search(rf"^{name}=(/\S+)$", text, re.MULTILINE)
        if match is None:
            raise ImageError(f"{script}: no {name}=/PATH line")
        found[name.lower()] = match[1]
    return Layout(**found)


def _unsafe_for_mount(path: Path) -> bool:
    # overlayfs's options are split on commas and its lower directories on colons.
    return any(character in str(path) for character in ",:\n")


def stage(base: Path, context: Path, upper: Path) -> None:
    """Run image-root.sh from ``context`` in ``base``; what it writes goes to ``upper`` (made empty)."""
    if os.geteuid() != 0:
        raise ImageError("making the image's root needs root (overlayfs, chroot)")
    for path in (base, context, upper):
        if _unsafe_for_mount(path.resolve()):
            raise ImageError(f"{path}: a comma or colon in the path, which overlayfs cannot take")
    if not (base / "usr" / "bin" / "python3").exists():
        raise ImageError(
            f"{base}: no usr/bin/python3 (tests/fetch-rootfs.sh CACHE bookworm-python makes one)"
        )
    scratch = upper.parent / f".{upper.name}.overlay"
    for path in (upper, scratch):
        if path.exists():
            shutil.rmtree(path)
    upper.mkdir(parents=True)
    (scratch / "work").mkdir(parents=True)
    (scratch / "merged").mkdir()
    command = [
        "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _IN_NAMESPACE, "image-root",
        str(base.resolve()), str(upper.resolve()), str((scratch / "work").resolve()),
        str((scratch / "merged").resolve()), str(context.resolve()), *ENV,
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise ImageError(f"image-root.sh failed in {base} (status {done.returncode}):\n{tail}")
    check_upper(upper)


def check_upper(upper: Path) -> None:
    """Refuse what a layer could only say with whiteouts: a file of the base root removed or replaced
    by a directory (overlayfs's 0:0 device and opaque directory)."""
    for name, status in entries(upper):
        if stat.S_ISCHR(status.st_mode) and status.st_rdev == 0:
            raise ImageError(f"image-root.sh removed /{name} from the base root; it may only add")
        if stat.S_ISDIR(status.st_mode):
            try:
                opaque = os.getxattr(upper / name, "trusted.overlay.opaque", follow_symlinks=False)
            except OSError:
                continue
            if opaque == b"y":
                raise ImageError(f"image-root.sh replaced /{name} of the base root; it may only add")
