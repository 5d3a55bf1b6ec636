"""The claims the plugin prepared, kept on disk: ``<plugin dir>/checkpoint.json``.

The kubelet does not send Prepare again for the pods that run when the plugin restarts, and Unprepare
names only the claim: what was prepared, and where a prepare stopped, must outlive the process. Each
claim is ``started`` before anything is written for it and ``completed`` once its spec is written, so
a prepare cut short is known and rolled back, never left half done.

The file is written whole and atomically (temp file, fsync, rename, fsync of the directory) into a
directory root's alone. It holds::

    {"version": 1, "bootID": "...", "claims": {"<uid>": {...}}, "checksum": "sha256:<hex>"}

The checksum is over the document as read (every key but ``checksum``, keys sorted, no spaces), not
over what this version would write again: a later version may add fields, and an older file still
checks. A version this cdictk does not know, a bad checksum or a file that is no checkpoint is an
error in one line, never an empty start: that would forget prepared claims and refuse nothing.

``bootID`` is the node's boot id (``/proc/sys/kernel/random/boot_id``). Another one means the node
rebooted: no container of before runs, the claims' specs in the tmpfs ``/var/run/cdi`` are gone, and
the kubelet prepares again what its pods need. The plugin then starts with no prepared claim.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, read_fd

FILE = "checkpoint.json"
VERSION = 1
STARTED = "started"
COMPLETED = "completed"
MAX_BYTES = 64 << 20  # 32 results a claim, a few hundred bytes each: room for many thousands of claims


class CheckpointError(CdictkError):
    """The checkpoint cannot be read or written: one line saying why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, "", reason)


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim as the kubelet gets it (request names, pool, device, CDI ids),
    with what the check for a device prepared twice needs (admin access, share ID)."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    admin_access: bool = False
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    state: str  # STARTED or COMPLETED
    devices: tuple[PreparedDevice, ...]


def boot_id(proc_root: str = "/proc") -> str:
    """The node's boot id, new at every boot; CheckpointError when it cannot be read."""
    path = os.path.join(proc_root, "sys/kernel/random/boot_id")
    try:
        with open(path, encoding="ascii") as file:
            found = file.read(100).strip()
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            path, f"cannot read the boot id: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if not found:
        raise CheckpointError(path, "the boot id is empty")
    return found


class Checkpoint:
    """The checkpoint file of a plugin directory, for the boot ``boot_id`` names."""

    def __init__(self, plugin_dir: str, *, proc_root: str = "/proc") -> None:
        self.path = os.path.join(os.path.abspath(plugin_dir), FILE)
        self.boot_id = boot_id(proc_root)

    def load(self) -> dict[str, PreparedClaim]:
        """The prepared claims by UID: none when there is no file yet or it is of another boot."""
        data = self._read()
        if data is None:
            return {}
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise CheckpointError(self.path, f"not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise CheckpointError(self.path, "not a checkpoint: not an object")
        version = document.get("version")
        if version != VERSION:
            raise CheckpointError(self.path, f"version {version!r} is not one this cdictk reads ({VERSION})")
        if document.get("checksum") != _checksum(document):
            raise CheckpointError(self.path, "checksum mismatch: the file was changed or cut short")
        if document.get("bootID") != self.boot_id:
            return {}  # the node rebooted: nothing prepared before is in use or on the tmpfs any more
        claims = document.get("claims")
        if not isinstance(claims, dict):
            raise CheckpointError(self.path, "claims: not an object")
        try:
            return {uid: _claim(entry) for uid, entry in claims.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(self.path, f"claims: not a checkpoint entry ({exc!r})") from None

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the file with ``claims``, atomically."""
        document: dict[str, Any] = {
            "version": VERSION,
            "bootID": self.boot_id,
            "claims": {uid: _entry(claim) for uid, claim in sorted(claims.items())},
        }
        document["checksum"] = _checksum(document)
        data = json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"
        try:
            atomic_write(self.path, data, mode=0o600, keep_mode=False)
        except CdictkError as exc:
            raise CheckpointError(self.path, f"not written: {exc}") from None
        except OSError as exc:
            raise CheckpointError(self.path, f"not written: {exc.strerror or exc}") from None

    def _read(self) -> bytes | None:
        # Not through a link: the file is root's state, in a directory root's alone.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(self.path, f"cannot open: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CheckpointError(self.path, "not a regular file")
            data = read_fd(fd, MAX_BYTES)
        except OSError as exc:
            raise CheckpointError(self.path, f"cannot read: {exc.strerror}") from None
        finally:
            os.close(fd)
        if data is None:
            raise CheckpointError(self.path, f"over the {MAX_BYTES}-byte limit")
        return data


def _checksum(document: Mapping[str, Any]) -> str:
    body = {key: value for key, value in document.items() if key != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _entry(claim: PreparedClaim) -> dict[str, Any]:
    return {
        "namespace": claim.namespace,
        "name": claim.name,
        "state": claim.state,
        "devices": [
            {
                "requestNames": list(device.request_names),
                "pool": device.pool,
                "device": device.device,
                "cdiDeviceIDs": list(device.cdi_device_ids),
                "adminAccess": device.admin_access,
                "shareID": device.share_id,
            }
            for device in claim.devices
        ],
    }


def _claim(entry: Mapping[str, Any]) -> PreparedClaim:
    state = entry["state"]
    if state not in (STARTED, COMPLETED):
        raise ValueError(f"state {state!r}")
    devices = tuple(
        PreparedDevice(
            request_names=tuple(_strings(device["requestNames"])),
            pool=_text(device["pool"]),
            device=_text(device["device"]),
            cdi_device_ids=tuple(_strings(device["cdiDeviceIDs"])),
            admin_access=device["adminAccess"] is True,
            share_id=_text(device["shareID"]) if device["shareID"] is not None else None,
        )
        for device in entry["devices"]
    )
    return PreparedClaim(_text(entry["namespace"]), _text(entry["name"]), state, devices)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _strings(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return [_text(item) for item in value]
