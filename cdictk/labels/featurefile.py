"""Node Feature Discovery's local feature file: one ``name=value`` a line in a file of NFD's
``features.d`` directory, which nfd-worker turns into node labels.

Written sorted, with a comment saying who wrote it, and (when asked) an ``# +expiry-time=`` directive
first: NFD drops the lines after an expired time at its next look, so labels whose writer died without
removing them do not stay on the node for good. The file is replaced atomically (temp file, fsync,
rename) and only when its bytes change; the temp file's name starts with a dot, which nfd-worker skips.
"""

from __future__ import annotations

import datetime
import os
import re

from cdictk.nvcdi.specfile import OnDisk, Stamp, read, settle
from cdictk.startpath.helpers.errors import CdictkError

FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
DEFAULT_NAME = "cdictk-gpu"  # not GFD's "gfd", so that both may run on a node
MAX_BYTES = 64 << 10  # nfd-worker ignores a larger file
EXPIRY = "# +expiry-time="
HEADER = "# NVIDIA GPU labels, written by cdictk node-labels"
# A label name NFD takes: a prefix (a DNS subdomain) and a name, both as Kubernetes spells them.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class FeatureFileError(CdictkError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, "", reason)


def render(labels: dict[str, str], expires: datetime.datetime | None = None) -> bytes:
    """The file's bytes for ``labels``; ``expires``: the time after which NFD drops them."""
    lines = [HEADER]
    if expires is not None:
        lines.append(EXPIRY + expires.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    for name in sorted(labels):
        value = labels[name]
        if not _NAME.fullmatch(name) or "\n" in value or "\r" in value:
            raise FeatureFileError("", f"cannot write the label {name}={value!r}")
        lines.append(f"{name}={value}")
    data = ("\n".join(lines) + "\n").encode()
    if len(data) > MAX_BYTES:
        raise FeatureFileError("", f"{len(data)} bytes of labels: NFD ignores a file over {MAX_BYTES}")
    return data


def parse(text: str) -> tuple[dict[str, str], datetime.datetime | None]:
    """The labels of a feature file and its (first) expiry time: what nfd-worker reads from it. A name
    without ``=`` is ``true``; comments and blank lines are skipped."""
    labels: dict[str, str] = {}
    expires = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(EXPIRY) and expires is None:
            expires = datetime.datetime.fromisoformat(stripped.removeprefix(EXPIRY))
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, value = stripped.partition("=")
        labels[name] = value if sep else "true"
    return labels, expires


def current(path: str) -> OnDisk:
    """The file at ``path`` now (refused when it is not a regular file)."""
    return read(path)


def update(path: str, data: bytes, on_disk: OnDisk | None = None) -> tuple[bool, Stamp | None]:
    """Write ``data`` at ``path`` unless it holds it already (as ours, mode 0644): (written, stamp)."""
    written, stamp, _ = settle(path, data, read(path) if on_disk is None else on_disk)
    return written, stamp


def remove(path: str) -> bool:
    """Remove the file (its labels leave the node at NFD's next look); whether there was one."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise FeatureFileError(path, f"cannot remove: {exc.strerror}") from exc
    return True
