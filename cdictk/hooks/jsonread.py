"""The hooks' strict JSON reader: :mod:`cdictk.fastjson`, with its errors as :class:`HookError`."""

from __future__ import annotations

from cdictk import fastjson
from cdictk.hooks.hookerror import HookError

TYPE_CHECKING = False  # typing itself imports re: keep it out of the container start
if TYPE_CHECKING:
    from typing import Any


def loads(data: bytes, what: str) -> Any:
    """Parse ``data`` (UTF-8 JSON); any problem is a :class:`HookError` naming ``what``."""
    try:
        return fastjson.loads(data)
    except fastjson.JsonError as exc:
        raise HookError(f"{what}: {exc}") from None
