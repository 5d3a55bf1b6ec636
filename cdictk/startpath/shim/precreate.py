"""``cdictk-precreate``: podman's precreate OCI hook, turning GPU requests into CDI devices.

podman runs a hook of the ``precreate`` stage (hooks.d, see ``hooks/oci-hooks.d/``) before it creates
the container, with the container's OCI config on stdin, and creates the container from the config
the hook prints. This one applies the same requests as ``cdictk-runtime`` (``NVIDIA_VISIBLE_DEVICES``,
``NVIDIA_DRIVER_CAPABILITIES``; annotations only with ``accept-copied-annotations``, since podman copies
an image's own into the config), with the same settings file. A config that asks for nothing, or
holds what it asks for already, is printed back byte for byte. A request that cannot be met is one
line on stderr and exit status 1: podman then refuses to create the container.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from cdictk.startpath.misses import Misses

PROG = "cdictk-precreate"
MAX_CONFIG = 16 << 20


USAGE = """\
usage: cdictk-precreate < config.json > config.json

podman's precreate OCI hook (hooks/oci-hooks.d/cdictk-precreate.json): reads a container's OCI config
on stdin, applies the GPUs it asks for (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES) from the
CDI spec dirs and prints the config; one that asks for nothing, or has its GPUs already, is printed back
byte for byte. A request that cannot be met is one line on stderr, exit status 1. cdi.k8s.io/*
annotations ask for nothing here (podman copies the image's own into the config) unless
requests.accept-copied-annotations is true: ask with podman run --device nvidia.com/gpu=0 instead.
Settings: /etc/cdictk/config.toml ($CDICTK_CONFIG), as for cdictk-runtime."""


def main(argv: Sequence[str] | None = None, *, misses: Misses) -> int:
    """The hook's command line (:mod:`cdictk.entrypoints.precreate` runs it); ``misses``: the slow
    path, where a cache misses."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args or sys.stdin.isatty():  # podman passes no arguments and a pipe
        print(USAGE, file=sys.stdout if args in (["--help"], ["-h"]) else sys.stderr)
        return 0 if args in (["--help"], ["-h"]) else 2
    data = sys.stdin.buffer.read(MAX_CONFIG + 1)
    try:
        if len(data) > MAX_CONFIG:
            raise ValueError(f"the OCI config on stdin is larger than {MAX_CONFIG} bytes")
        changed = _apply(data, misses)
    except Exception as exc:  # one line: podman shows it, and the container is not created
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(data if changed is None else changed)
    sys.stdout.flush()
    return 0


def _apply(data: bytes, misses: Misses) -> bytes | None:
    from cdictk.startpath.helpers.ociconfig import dump_config, parse_config  # noqa: PLC0415
    from cdictk.startpath.shim.inject import apply_requests  # noqa: PLC0415
    from cdictk.startpath.shim.settings import load_settings  # noqa: PLC0415
    from cdictk.startpath.specs.parsecache import ParseCache  # noqa: PLC0415

    where = "<OCI config on stdin>"
    cache = ParseCache.from_environment()
    config = parse_config(data, where)
    if not apply_requests(config, load_settings(cache=cache), where, cache, _warn, misses=misses):
        return None
    return dump_config(config, compact=True)


def _warn(line: str) -> None:
    print(f"{PROG}: warning: {line}", file=sys.stderr)
