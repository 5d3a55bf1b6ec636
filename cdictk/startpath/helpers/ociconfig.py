"""Reading and writing an OCI runtime ``config.json``: size cap, strict JSON, atomic replace.

Standard library only, without :mod:`json` or :mod:`typing` at import: the runtime shim rewrites
config.json on every container create, compactly (runc reads it, not a person).
"""

from __future__ import annotations

from cdictk.startpath.helpers import fsutil, strictjson
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_CONFIG_BYTES = 16 << 20


def parse_config(data: bytes, file: str) -> dict[str, Any]:
    if len(data) > MAX_CONFIG_BYTES:
        raise CdictkError(file, "", f"over the {MAX_CONFIG_BYTES}-byte limit")
    config = strictjson.loads(data, file)
    if not isinstance(config, dict):
        raise CdictkError(file, "", "an OCI config must be a JSON object")
    return config


def read_config(path: str) -> dict[str, Any]:
    return parse_config(fsutil.read_capped(path, MAX_CONFIG_BYTES), path)


def dump_config(config: dict[str, Any], *, compact: bool = False) -> bytes:
    """``config`` as JSON: indented for people, or ``compact`` (no :mod:`json` import) for runtimes."""
    if compact:
        return strictjson.dumps(config)
    import json  # noqa: PLC0415

    return (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode()


def write_config(path: str, config: dict[str, Any], *, compact: bool = False, in_place: bool = False) -> None:
    """``in_place``: ``path`` is the config read, in its bundle (the engine's directory, unchecked)."""
    atomic_write(path, dump_config(config, compact=compact), engine_directory=in_place)
