"""create-symlinks: the links a driver's libraries and devices need, made inside the container.

Each ``--link TARGET::LINK`` makes LINK (a container path) a symlink whose content is TARGET, stored
verbatim and never resolved, like ``ln -sfn``: an existing file or link at LINK is replaced
atomically, an identical link is left alone, a missing parent directory is created. LINK and its
parents are resolved inside the rootfs, so a directory link in the image such as ``/usr/lib64 -> /``
cannot put the link on the host (NVIDIA's CVE-2024-0134).

A *device link* is made only when the device it points to is in the container: the batched hook
carries the by-path links of every GPU in the spec and the runtime has already created the nodes of
the devices this container asked for.
"""

from __future__ import annotations

import os
import posixpath

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.steps import Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.startpath.helpers.rootfs import Rootfs


def parse_link(text: str) -> tuple[str, str]:
    """``TARGET::LINK`` -> (target, link); LINK must be absolute."""
    parts = text.split("::")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise HookError(f"--link {text!r}: expected TARGET::LINK")
    target, link = parts
    if not link.startswith("/"):
        raise HookError(f"--link {text!r}: the link must be an absolute container path")
    for value in parts:
        if any(ord(char) < 0x20 for char in value):
            raise HookError(f"--link {text!r}: control characters are not allowed")
    if ".." in link.split("/"):
        raise HookError(f"--link {text!r}: the link must not contain '..'")
    if posixpath.basename(posixpath.normpath(link)) in ("", "/", "."):
        raise HookError(f"--link {text!r}: the link must name a file")
    return target, link


def create_symlinks(rootfs: Rootfs, links: list[tuple[str, str]], *, devices_only: bool = False) -> list[str]:
    """Make the links; returns those that were created or changed. Duplicates are made once."""
    wanted = list(dict.fromkeys(links))
    if devices_only:
        wanted = [(target, link) for target, link in wanted if _target_exists(rootfs, target, link)]
    try:
        return rootfs.symlinks(wanted)
    except OSError as exc:
        link = exc.filename or "?"
        target = next((t for t, path in wanted if path == link), "?")
        raise HookError(f"cannot create link {link} -> {target}: {exc.strerror}") from None


def _target_exists(rootfs: Rootfs, target: str, link: str) -> bool:
    # Lexical: the link's directory may not exist yet. The open itself is confined to the rootfs.
    path = target if target.startswith("/") else posixpath.join(posixpath.dirname(link), target)
    try:
        fd = rootfs.open(posixpath.normpath(path), os.O_PATH)
    except OSError:
        return False
    os.close(fd)
    return True


def prepare(options: Options) -> Prepared:
    """The create-symlinks step: every link is checked before any is made."""
    links = [parse_link(text) for text in options.all("link")]
    device_links = [parse_link(text) for text in options.all("device-link")]

    def run(rootfs: Rootfs) -> None:
        changed = create_symlinks(rootfs, links) + create_symlinks(rootfs, device_links, devices_only=True)
        options.log(f"links created: {', '.join(changed) or 'none'}")

    return Prepared(run)
