"""``cdictk-precreate``: podman's precreate OCI hook, turning GPU requests into CDI devices.

podman runs a hook of the ``precreate`` stage (hooks.d, see ``hooks/oci-hooks.d/``) before it creates
the container, with the container's OCI config on stdin, and creates the container from the config
the hook prints. This one applies the same requests as ``cdictk-runtime`` (annotations,
``NVIDIA_VISIBLE_DEVICES``, ``NVIDIA_DRIVER_CAPABILITIES``), with the same settings file. A config that
asks for nothing is printed back byte for byte. A request that cannot be met is one line on stderr
and exit status 1: podman then refuses to create the container.
"""

from __future__ import annotations

import sys

PROG = "cdictk-precreate"
MAX_CONFIG = 16 << 20


def main() -> int:
    data = sys.stdin.buffer.read(MAX_CONFIG + 1)
    try:
        if len(data) > MAX_CONFIG:
            raise ValueError(f"the OCI config on stdin is larger than {MAX_CONFIG} bytes")
        changed = _apply(data)
    except Exception as exc:  # one line: podman shows it, and the container is not created
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(data if changed is None else changed)
    sys.stdout.flush()
    return 0


def _apply(data: bytes) -> bytes | None:
    from cdictk.ociconfig import dump_config, parse_config  # noqa: PLC0415
    from cdictk.runtime.cache import Cache  # noqa: PLC0415
    from cdictk.runtime.inject import apply_requests  # noqa: PLC0415
    from cdictk.runtime.settings import load_settings  # noqa: PLC0415

    where = "<OCI config on stdin>"
    cache = Cache.from_environment()
    config = parse_config(data, where)
    if not apply_requests(config, load_settings(cache=cache), where, cache):
        return None
    return dump_config(config, compact=True)


if __name__ == "__main__":
    sys.exit(main())
