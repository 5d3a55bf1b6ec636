"""How a YAML 1.1 reader types an unquoted scalar.

The CDI reference library reads YAML with Go's yaml.v2 rules, where ``y``, ``no``, ``on``, ``0660``
(octal), ``0x1F`` and ``1_000`` are not strings. We read plain scalars by the same rules, and the
dumper quotes every string that these rules would not read back as the same string.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timestamp:
    """A plain scalar that YAML 1.1 reads as a date; no CDI field takes one."""

    text: str


Scalar = str | int | float | bool | None | Timestamp

_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_BOOL = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_SPECIAL_FLOAT = {
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
}
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"(?:(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?"  # time of day
    r"(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?"  # time zone
)
_PREFIXED_BASES = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}


def resolve_plain(text: str) -> Scalar:
    """The value a YAML 1.1 reader gives the unquoted scalar ``text``."""
    if text in _NULL:
        return None
    boolean = _BOOL.get(text)
    if boolean is not None:
        return boolean
    if text[0] in "0123456789+-.":
        number = _number(text)
        if number is not None:
            return number
        if _TIMESTAMP.fullmatch(text):
            return Timestamp(text)
    return text


def go_text(value: object) -> str | None:
    """The text the Go library makes of a scalar where it wants a string: the string itself, a date as
    written (its YAML reader hands dates on as their text), true or false, or an integer in decimal (so
    YAML 1.1's 0660 becomes "432"); None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, Timestamp):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return None


# YAML 1.1 base-60 numbers ("1:20" is 80 to PyYAML). Go's reader keeps them as strings, so loading
# does not resolve them, but a spec we write must read the same in either, hence quoted.
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")


def is_ambiguous(text: str) -> bool:
    """True when ``text`` written unquoted would be read back as something other than this string."""
    return not isinstance(resolve_plain(text), str) or _SEXAGESIMAL.fullmatch(text) is not None


def _number(text: str) -> int | float | None:
    plain = text.replace("_", "")
    body = plain.lstrip("+-")
    if len(plain) - len(body) > 1 or not body:
        return None
    sign = -1 if plain[0] == "-" else 1
    try:
        base = _PREFIXED_BASES.get(body[:2])
        if base is not None:
            return sign * int(body[2:], base)
        if body.isascii() and body.isdigit():
            # A leading zero means octal in YAML 1.1 (fileMode: 0660 is 432); 09 falls through to float.
            return sign * int(body, 8 if len(body) > 1 and body[0] == "0" else 10)
    except ValueError:
        pass
    if _FLOAT.fullmatch(plain):
        return float(plain)
    return _SPECIAL_FLOAT.get(text)
