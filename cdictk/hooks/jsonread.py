"""Strict JSON for the hooks' untrusted input, without importing :mod:`json` on every container start.

:mod:`json` pulls in :mod:`re` and :mod:`enum`, about 10 ms of imports on a small machine, for
nothing the hooks need. CPython's own C scanner (``_json``), which :mod:`json` itself uses, parses
just as well; it is driven here with duplicate keys and NaN/Infinity refused. Interpreters without
``_json`` fall back to :mod:`json`.
"""

from __future__ import annotations

from cdictk.hooks.hookerror import HookError

TYPE_CHECKING = False  # typing itself imports re: keep it out of the container start
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"
_INFINITY = float("inf")


class _Context:
    """The attributes the C scanner reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    parse_int = int
    memo: dict[str, str] = {}  # noqa: RUF012 - the scanner keeps its own memo; the attribute must exist

    @staticmethod
    def object_pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise ValueError(f'duplicate key "{key}"')
                seen.add(key)
        return result

    @staticmethod
    def parse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    @staticmethod
    def parse_float(text: str) -> float:
        value = float(text)
        if value in (_INFINITY, -_INFINITY):
            raise ValueError(f"{text} is out of range")
        return value


def loads(data: bytes, what: str) -> Any:
    """Parse ``data`` (UTF-8 JSON); any problem is a :class:`HookError` naming ``what``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HookError(f"{what}: not UTF-8") from None
    try:
        return _scan_fast(text)
    except RecursionError:
        raise HookError(f"{what}: invalid JSON: nested too deeply") from None
    except Exception:
        return _loads_explained(text, what)


def _loads_explained(text: str, what: str) -> Any:
    import json  # noqa: PLC0415

    try:
        return json.loads(
            text,
            object_pairs_hook=_Context.object_pairs_hook,
            parse_constant=_Context.parse_constant,
            parse_float=_Context.parse_float,
        )
    except json.JSONDecodeError as exc:
        raise HookError(f"{what}: invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise HookError(f"{what}: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise HookError(f"{what}: invalid JSON: {exc}") from None


def _scan_fast(text: str) -> Any:
    from _json import make_scanner  # noqa: PLC0415 - ImportError (PyPy) takes the slow path

    start = len(text) - len(text.lstrip(_WHITESPACE))
    value, end = make_scanner(_Context())(text, start)  # type: ignore[arg-type]
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data at character {end}")
    return value
