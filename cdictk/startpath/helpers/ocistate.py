"""The container a hook works on: OCI state on stdin, then its rootfs.

runc and crun pass the OCI state as JSON on stdin. crun adds a ``root`` field holding the rootfs it
actually uses (it differs from ``config.json`` under ``--userns=nomap`` and podman's overlay); runc
does not, so the rootfs then comes from ``<bundle>/config.json`` ``root.path``, relative to the bundle.
Both inputs are untrusted in size and shape; a rootfs of "" or "/" is refused, so that no hook ever
works on the host's own root.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers import strictjson
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.fsutil import read_fd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO

MAX_STATE = 1 << 20  # state JSON is a few hundred bytes; podman's annotations make it a few KiB
MAX_CONFIG = 16 << 20  # a config.json with a very large environment is still far below this


class ContainerState:
    """What a hook knows of its container. A plain class: dataclasses' import would cost every start."""

    __slots__ = ("bundle", "id", "rootfs")

    def __init__(self, *, id: str, bundle: str, rootfs: str) -> None:
        self.id = id
        self.bundle = bundle
        self.rootfs = rootfs


def drain_state(stream: BinaryIO) -> None:
    """Read the state a hook has no use for, so that its writer never sees the pipe closed.

    crun fails a hook whose stdin it could not write (EPIPE, shown as "exit code: -33"), so a hook
    that exits at once without reading would fail the container now and then.
    """
    try:
        interactive = os.isatty(stream.fileno())
    except (OSError, ValueError):  # no descriptor behind it: a test's buffer
        interactive = False
    if interactive:  # a person at a terminal gets the answer without typing a state
        return
    try:
        stream.read(MAX_STATE + 1)
    except (OSError, ValueError):  # closed or unreadable: nobody is waiting to write
        return


def read_state(stream: BinaryIO) -> dict[str, Any]:
    data = stream.read(MAX_STATE + 1)
    if len(data) > MAX_STATE:
        raise HookError(f"OCI state on stdin: larger than {MAX_STATE} bytes")
    if not data.strip():
        raise HookError(
            "OCI state on stdin: empty (a hook is run by the container runtime, with the state on stdin)"
        )
    state = strictjson.loads_for_hook(data, "OCI state on stdin")
    if not isinstance(state, dict):
        raise HookError("OCI state on stdin: not a JSON object")
    return state


def container_state(state: dict[str, Any]) -> ContainerState:
    """Where the container's rootfs is, from the state and, if needed, the bundle's config.json."""
    ident, bundle = id_and_bundle(state)
    root = state.get("root")
    if root is not None:
        if not isinstance(root, str):
            raise HookError("OCI state: root must be a string")
    else:
        root = _root_from_config(bundle)
    return ContainerState(id=ident, bundle=bundle, rootfs=checked_rootfs(root, bundle))


def id_and_bundle(state: dict[str, Any]) -> tuple[str, str]:
    """The state's container id ("" when absent) and bundle directory, checked."""
    bundle = state.get("bundle")
    if not isinstance(bundle, str) or not bundle.startswith("/"):
        raise HookError(f"OCI state: bundle must be an absolute path, not {bundle!r}")
    check_path_string(bundle, "OCI state: bundle")
    ident = state.get("id", "")
    if not isinstance(ident, str):
        raise HookError("OCI state: id must be a string")
    return ident, bundle


def _root_from_config(bundle: str) -> str:
    path = os.path.join(bundle, "config.json")
    config = strictjson.loads_for_hook(_read_capped(path, MAX_CONFIG), path)
    if not isinstance(config, dict):
        raise HookError(f"{path}: not a JSON object")
    root = config.get("root")
    if not isinstance(root, dict):
        raise HookError(f"{path}: root: missing or not an object")
    root_path = root.get("path")
    if not isinstance(root_path, str):
        raise HookError(f"{path}: root.path: missing or not a string")
    return root_path


def check_path_string(path: str, what: str) -> None:
    if "\0" in path:
        raise HookError(f"{what}: NUL in the path")
    try:
        os.fsencode(path)
    except UnicodeError:
        raise HookError(f"{what}: {path!r} is not a valid file name") from None


def checked_rootfs(root: str, bundle: str) -> str:
    check_path_string(root, "container rootfs")
    if root.strip() in ("", "/"):
        raise HookError(f"container rootfs {root!r} refused: a hook never works on the host's root")
    # normpath keeps a leading "//" (POSIX leaves it implementation-defined); Linux reads it as "/".
    path = os.path.normpath("/" + os.path.join(bundle, root).lstrip("/"))
    if path == "/":
        raise HookError(f"container rootfs {root!r} refused: it is the host's root")
    return path


def _read_capped(path: str, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise HookError(f"{path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HookError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise HookError(f"{path}: larger than {limit} bytes")
        data = read_fd(fd, limit)
        if data is None:
            raise HookError(f"{path}: larger than {limit} bytes")
        return data
    finally:
        os.close(fd)
