"""Reading and writing an OCI runtime ``config.json``: size cap, strict JSON, atomic replace.

Standard library only: the runtime shim rewrites config.json on every container create.
"""

from __future__ import annotations

import json
from typing import Any

from cdictk import strictjson
from cdictk.errors import CdictkError
from cdictk.fsutil import atomic_write

MAX_CONFIG_BYTES = 16 << 20


def parse_config(data: bytes, file: str) -> dict[str, Any]:
    if len(data) > MAX_CONFIG_BYTES:
        raise CdictkError(file, "", f"over the {MAX_CONFIG_BYTES}-byte limit")
    config = strictjson.loads(data, file)
    if not isinstance(config, dict):
        raise CdictkError(file, "", "an OCI config must be a JSON object")
    return config


def read_config(path: str) -> dict[str, Any]:
    return parse_config(strictjson.read_capped(path, MAX_CONFIG_BYTES), path)


def dump_config(config: dict[str, Any]) -> bytes:
    return (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode()


def write_config(path: str, config: dict[str, Any]) -> None:
    atomic_write(path, dump_config(config))
