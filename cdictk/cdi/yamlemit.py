"""Block-style YAML for the specs we write, without PyYAML: byte for byte what PyYAML's emitter (libyaml's
or its own Python one) makes of the events :func:`cdictk.cdi.dump.emit_with_pyyaml` builds.

``cdictk cdi generate`` starts a fresh interpreter for one dump, where importing PyYAML alone cost about
15 ms (issue 19). This module imports nothing, and yamlscalar's regular expressions (``re``) only for
the rare string that looks like a number and that the checks below cannot settle.

It writes only what it can show to be the same: dicts with string keys, lists, bools, ints and strings of
printable ASCII (space to tilde) short enough that no emitter folds a line or refuses a simple key. For
anything else :func:`emit` returns None, and the caller writes the whole document through PyYAML, so the
output never depends on which path wrote it. tests/unit/cdi/test_yamlemit.py holds the two to that.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing imports re: keep both off the dump path
if TYPE_CHECKING:
    from typing import Any

# PyYAML's Python emitter takes a key for a simple key (``key: value``) below 128 characters, libyaml
# up to 128; longer ones become ``? key``, and an empty one does in the Python emitter only.
_MAX_KEY = 127
# Both emitters fold a line at a space past column 65,536 (the width dump.py gives): a string of at
# most 4,096 characters (8,192 with its quotes doubled), after at most 1,000 levels of two-space
# indent (Python's recursion limit stops deeper data first) and a short key, never gets there.
_MAX_TEXT = 4096

# A string that PyYAML would otherwise write plain is quoted when a YAML 1.1 reader (ours:
# cdictk.cdi.yamlscalar) or PyYAML's own resolver would take it for something else. Every such string
# starts with one of these characters; PyYAML's resolver counts "!", "&" and "*" alone as the 'yaml' tag.
_MAY_BE_RETYPED = frozenset("0123456789+-.~<=!&*nNyYtTfFoO")
_NUMBER_STARTS = frozenset("0123456789+-.")
# Whole strings either reader retypes: YAML 1.1 bools (ours reads y and n too) and nulls, the special
# floats, PyYAML's merge key, value key and 'yaml' tag.
_RETYPED_WORDS = frozenset(
    (
        *("y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO"),
        *("true", "True", "TRUE", "false", "False", "FALSE"),
        *("on", "On", "ON", "off", "Off", "OFF"),
        *("~", "null", "Null", "NULL"),
        *(".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"),
        *(".nan", ".NaN", ".NAN"),
        *("<<", "=", "!", "&", "*"),
    )
)
# Every character a number, a date or a time of either reader can hold: digits, signs, point, colon,
# underscore, exponent, the 0x/0o/0b prefixes and hex digits, the T, Z and space of a timestamp (and
# the space Python's int() strips, which yamlscalar's octal and hex reading goes through).
_NUMBER_CHARS = "0123456789+-._: abcdefABCDEFxXoOtTZ"
_DIGITS = "0123456789"

# A plain scalar in block context cannot start with an indicator or a space.
_NOT_PLAIN_FIRST = frozenset(" #,[]{}&*!|>'\"%@`")


class Unsupported(Exception):
    """The data holds something this module does not write the way PyYAML does."""


def emit(data: dict[str, Any]) -> str | None:
    """``data`` (as :func:`cdictk.cdi.dump.to_data` makes it) as a YAML document; None where PyYAML's
    path must write it."""
    if not data:
        return "--- {}\n"
    out = ["---"]
    try:
        _mapping(data, "\n", "\n", out, {})
    except Unsupported:
        return None
    out.append("\n")
    return "".join(out)


def _mapping(mapping: dict[Any, Any], first: str, line: str, out: list[str], cache: dict[str, str]) -> None:
    """A non-empty mapping's entries: the first after ``first`` (``line``, or nothing right after a
    sequence's "- "), the others after ``line`` (a line break and the mapping's indent)."""
    lead = first
    for key, value in mapping.items():
        out.append(lead)
        lead = line
        out.append(_key(key, cache))
        kind = type(value)
        if kind is dict:
            if value:
                out.append(":")
                inner = line + "  "
                _mapping(value, inner, inner, out, cache)
            else:
                out.append(": {}")
        elif kind is list:
            # PyYAML does not indent a sequence under a mapping key: "key:\n- item".
            if value:
                out.append(":")
                _sequence(value, line, line, out, cache)
            else:
                out.append(": []")
        else:
            out.append(": ")
            out.append(_scalar(value, cache))


def _sequence(sequence: list[Any], first: str, line: str, out: list[str], cache: dict[str, str]) -> None:
    """A non-empty sequence's items, each "- " at ``line``'s indent, the first after ``first``. A
    collection in an item starts on the item's line, two columns in: "- key: v" and "- - item"."""
    lead = first
    for item in sequence:
        out.append(lead)
        lead = line
        kind = type(item)
        if kind is dict:
            if item:
                out.append("- ")
                _mapping(item, "", line + "  ", out, cache)
            else:
                out.append("- {}")
        elif kind is list:
            if item:
                out.append("- ")
                _sequence(item, "", line + "  ", out, cache)
            else:
                out.append("- []")
        else:
            out.append("- ")
            out.append(_scalar(item, cache))


def _key(key: object, cache: dict[str, str]) -> str:
    # An empty key or a long one is written differently by the two PyYAML emitters.
    if type(key) is not str or not key or len(key) > _MAX_KEY:
        raise Unsupported
    return _text(key, cache)


def _scalar(value: object, cache: dict[str, str]) -> str:
    if type(value) is str:
        return _text(value, cache)
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:  # the model has no other scalar type; subclasses (enums) go to PyYAML
        return str(value)
    raise Unsupported


def _text(value: str, cache: dict[str, str]) -> str:
    """``value`` as PyYAML writes it, remembered: keys, mount options and types repeat on every device."""
    text = cache.get(value)
    if text is None:
        text = cache[value] = _render(value)
    return text


def _render(value: str) -> str:
    if not value:
        return "''"  # plain, it would read back as null
    if len(value) > _MAX_TEXT or not (value.isascii() and value.isprintable()):
        raise Unsupported  # escapes, line breaks, tabs, non-ASCII: PyYAML's
    if needs_double_quotes(value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if _plain_allowed(value):
        return value
    return "'" + value.replace("'", "''") + "'"


def _plain_allowed(value: str) -> bool:
    """Whether PyYAML's emitter writes the non-empty printable ASCII ``value`` plain in block context,
    rather than single-quoted: it must not start with an indicator or a space, nor end with a space,
    nor hold ": " or " #", which a reader would take for structure or a comment."""
    first = value[0]
    if first in _NOT_PLAIN_FIRST:
        return False
    # "?", ":" and "-" are indicators when a space or the end follows ("- x" is a sequence item).
    if first in "?:-" and (len(value) == 1 or value[1] == " "):
        return False
    if value.startswith(("---", "...")):  # document markers
        return False
    return value[-1] not in " :" and ": " not in value and " #" not in value


def needs_double_quotes(value: str) -> bool:
    """Whether dump.py quotes the non-empty printable ASCII ``value`` because a YAML 1.1 reader or
    PyYAML's resolver would retype it: ``is_ambiguous(value) or retyped_by_pyyaml(value)``, settled
    without either (and their regular expressions) for all but a few strings that look like numbers."""
    first = value[0]
    if first not in _MAY_BE_RETYPED:
        return False  # paths, names, options: most strings end here
    if value in _RETYPED_WORDS:
        return True
    if first not in _NUMBER_STARTS:
        return False  # a letter, "~", "<", "=", "!", "&" or "*" first: only the words above retype
    settled = _settle_number(value)
    if settled is not None:
        return settled
    from cdictk.cdi.yamlscalar import is_ambiguous, retyped_by_pyyaml  # noqa: PLC0415 (re: rare)

    return is_ambiguous(value) or retyped_by_pyyaml(value)


def _settle_number(value: str) -> bool | None:
    """For printable ASCII starting with a digit, sign or point, and not a word above: whether either
    reader takes it for a number, date or time, or None where only the regular expressions can tell.

    Settled here: what no number can be (a sign not followed by a digit, point or underscore, which
    our reader drops; a character no number holds), and the forms of device names and versions: digits
    ("0"), digits with points ("1.0" is a float, "0.5.0" a string) and base 60 ("0:0")."""
    if value[0] in "+-" and (len(value) == 1 or value[1] not in "0123456789._"):
        return False  # "--flag", "-x"
    if value.strip(_NUMBER_CHARS):  # strip leaves something: a character outside the set
        return False
    if value.strip("0123456789.:"):
        return None  # signs, exponents, prefixes, dates: the regular expressions'
    if ":" not in value:
        # Digits are an int, digits with one point a float; "." and two points or more are strings.
        points = value.count(".")
        return points == 0 or (points == 1 and len(value) > 1)
    return _base_60(value)


def _base_60(value: str) -> bool:
    """Whether digits, points and colons read as a YAML 1.1 base-60 number: digits, then one or more
    ":" and a number below 60 in one or two digits, then optionally a point and digits ("1:20:30.5")."""
    head, *parts = value.split(":")
    if not head.isdigit():
        return False
    last, _point, fraction = parts[-1].partition(".")
    if fraction and not fraction.isdigit():
        return False
    parts[-1] = last
    return all(_below_60(part) for part in parts)


def _below_60(part: str) -> bool:
    if len(part) == 1:
        return part in _DIGITS
    return len(part) == 2 and part[0] in "012345" and part[1] in _DIGITS
