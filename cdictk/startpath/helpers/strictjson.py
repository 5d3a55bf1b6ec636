"""Strict JSON, in and out, for everything cdictk reads and writes, without importing :mod:`json`.

The hooks and the runtime shim read untrusted JSON (OCI state, ``config.json``) and the shim writes
``config.json`` back, on every container start. :mod:`json` pulls in :mod:`re` and :mod:`enum`, imports
that cost every start for nothing needed here. CPython's own C scanner and encoder
(``_json``), which :mod:`json` itself uses, do the work: duplicate keys and NaN/Infinity are refused.
Interpreters without ``_json`` fall back to :mod:`json`.
"""

from __future__ import annotations

from cdictk.startpath.helpers.errors import CdictkError, HookError

TYPE_CHECKING = False  # typing itself imports re: keep it out of the container start
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"
_INFINITY = float("inf")


class JsonError(ValueError):
    """Why the input is not acceptable JSON, in a few words (the caller names the input)."""


def object_pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; a key given twice is an error (Go and Python keep the last silently)."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonError(f'duplicate key "{key}"')
            seen.add(key)
    return result


def parse_constant(name: str) -> Any:
    """NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not valid JSON")


def parse_float(text: str) -> float:
    """A number too large for a float (``1e999``) is an error rather than infinity."""
    value = float(text)
    if value in (_INFINITY, -_INFINITY):
        raise ValueError(f"{text} is out of range")
    return value


class _Context:
    """The attributes the C scanner reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    parse_int = int
    memo: dict[str, str] = {}  # noqa: RUF012 - the scanner keeps its own memo; the attribute must exist
    object_pairs_hook = staticmethod(object_pairs_hook)
    parse_constant = staticmethod(parse_constant)
    parse_float = staticmethod(parse_float)


def parse(data: bytes) -> Any:
    """Parse ``data`` (UTF-8 JSON); any problem is a :class:`JsonError`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonError("invalid JSON: not UTF-8") from None
    try:
        return _scan_fast(text)
    except RecursionError:
        raise JsonError("invalid JSON: nested too deeply") from None
    except Exception:
        return _loads_explained(text)


def _loads_explained(text: str) -> Any:
    import json  # noqa: PLC0415

    try:
        return json.loads(
            text, object_pairs_hook=object_pairs_hook, parse_constant=parse_constant, parse_float=parse_float
        )
    except json.JSONDecodeError as exc:
        reason, pos = _syntax_error(text, exc.msg, exc.pos)
        line = text.count("\n", 0, pos) + 1
        column = pos - text.rfind("\n", 0, pos)
        raise JsonError(f"invalid JSON: {reason} (line {line}, column {column})") from None
    except RecursionError:
        raise JsonError("invalid JSON: nested too deeply") from None
    except JsonError:
        raise
    except ValueError as exc:
        raise JsonError(f"invalid JSON: {exc}") from None


def _syntax_error(text: str, message: str, pos: int) -> tuple[str, int]:
    """json's reason and offset, except that a trailing comma is named and pointed at: before Python
    3.13, json reports one as "Expecting value" at the bracket after it, which hides the mistake."""
    if message.startswith("Illegal trailing comma"):  # Python 3.13 and later, at the comma
        return "trailing comma", pos
    before = text[:pos].rstrip(_WHITESPACE)
    if text.startswith(("]", "}"), pos) and before.endswith(","):
        return "trailing comma", len(before) - 1
    return message, pos


def _scan_fast(text: str) -> Any:
    from _json import make_scanner  # noqa: PLC0415 - ImportError (PyPy) takes the slow path

    start = len(text) - len(text.lstrip(_WHITESPACE))
    value, end = make_scanner(_Context())(text, start)  # type: ignore[arg-type]
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data at character {end}")
    return value


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON; a float that is not finite or a non-JSON type is a ValueError.

    Strings are written with ``\\u`` escapes for everything outside ASCII, so that what was read
    comes back exactly, a lone surrogate (``"\\ud800"``, valid JSON escapes but not UTF-8) included.
    """
    try:
        from _json import encode_basestring_ascii, make_encoder  # noqa: PLC0415
    except ImportError:  # PyPy
        import json  # noqa: PLC0415

        try:
            return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    encode = make_encoder(
        {},  # markers: a container inside itself is a ValueError, not a recursion crash
        _unserializable,
        encode_basestring_ascii,
        None,  # no indent: the C encoder writes compact JSON only
        ":",
        ",",
        False,  # sort_keys: the input's order is kept
        False,  # skipkeys
        False,  # allow_nan
    )
    try:
        return "".join(encode(value, 0)).encode()
    except TypeError as exc:  # a key that is not a string: one kind of error for the caller
        raise ValueError(str(exc)) from None


def _unserializable(value: object) -> object:
    raise ValueError(f"{type(value).__name__} is not JSON serializable")


def loads(text: str | bytes, file: str) -> Any:
    """Parse JSON, rejecting duplicate keys, NaN/Infinity and 1e999; errors name ``file`` and the position."""
    try:
        return parse(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    except JsonError as exc:
        raise CdictkError(file, "", str(exc)) from None


def loads_for_hook(data: bytes, what: str) -> Any:
    """Parse ``data`` (UTF-8 JSON) for a hook; any problem is a HookError naming ``what``."""
    try:
        return parse(data)
    except JsonError as exc:
        raise HookError(f"{what}: {exc}") from None
