"""Which spec files a FUSE daemon other than root's serves: a spec dir's check where the spec files
are parsed (:func:`cdictk.startpath.specs.specdirs.spec_paths` with ``mounts``: one of these).

A FUSE mount's daemon reports whatever owners and contents it chooses, so a file on another user's
mount (``allow_other``) is not root's alone whatever its mode says. The mount table is read once per
scan. No container start asks: the stored index keys on the spec dirs' devices instead, so a mount
made since it was built is a miss, and the scan that follows checks it here.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers import mountinfo


class FuseMounts:
    """The FUSE mounts of this process's mount table, read when first asked.

    Fails closed: a spec whose file system cannot be told (the file cannot be looked at, the mount
    table cannot be read or parsed) is a problem, not a pass."""

    def __init__(self) -> None:
        # device -> (fstype, the daemon's uid); or why the table could not be read
        self._fuse: dict[int, tuple[str, str]] | str | None = None

    def problem(self, path: str) -> str | None:
        """Why ``path`` (followed) is on a FUSE file system whose daemon is not root's, or may be."""
        try:
            device = os.stat(path).st_dev
        except OSError as exc:
            return f"{path}: {exc.strerror}: cannot tell which file system it is on"
        if self._fuse is None:
            self._fuse = fuse_mounts()
        if isinstance(self._fuse, str):
            return f"{path}: cannot tell whether a FUSE daemon serves it: {self._fuse}"
        found = self._fuse.get(device)
        if found is None or found[1] == "0":
            return None
        fstype, owner = found
        return (
            f"{path}: on a {fstype} file system mounted by uid {owner}: its daemon reports the owners "
            "and the contents"
        )


def fuse_mounts() -> dict[int, tuple[str, str]] | str:
    """The FUSE mounts by device, or why the mount table could not be read."""
    try:
        fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"/proc/self/mountinfo: {exc.strerror}"
    try:
        mounts = mountinfo.read(fd)
    except OSError as exc:
        return f"/proc/self/mountinfo: {exc.strerror}"
    except ValueError as exc:
        return str(exc)
    finally:
        os.close(fd)
    fuse: dict[int, tuple[str, str]] = {}
    for mount in mounts:
        if mount.fstype == "fuse" or mount.fstype.startswith(("fuse.", "fuseblk")):
            options = dict(option.partition("=")[::2] for option in mount.super_options.split(","))
            fuse[mount.dev] = (mount.fstype, options.get("user_id", "unknown"))
    return fuse
