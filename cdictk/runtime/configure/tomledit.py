"""Editing a TOML config without disturbing what we do not change.

The change is computed on plain dicts first (what the config must mean afterwards); ``sync`` then applies
the difference to the tomlkit document, so comments, order and layout outside the changed tables stay
byte for byte. Finally the result is parsed back with tomllib and compared with the intended dicts:
tomlkit can move a key into a new table when it adds one under root-level dotted keys, and a config that
means something else than intended must never be written.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from cdictk.errors import CdictkError

MAX_CONFIG_BYTES = 16 << 20


def load(text: str, file: str) -> tuple[Any, dict[str, Any]]:
    """The tomlkit document and the plain data of ``text``; a syntax error names line and column."""
    import tomlkit  # noqa: PLC0415 (lazy: only configure needs it)
    from tomlkit.exceptions import ParseError  # noqa: PLC0415

    if len(text) > MAX_CONFIG_BYTES:
        raise CdictkError(file, "", f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        document = tomlkit.parse(text)
        data = tomllib.loads(text)
    except ParseError as exc:
        # tomlkit counts columns from 0; editors and compilers count from 1.
        raise CdictkError(f"{file}:{exc.line}:{exc.col + 1}", "", _reason(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{file}:{match.group(1)}:{match.group(2)}" if match else file
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise CdictkError(where, "", f"invalid TOML: {reason}") from None
    return document, data


def _reason(exc: Exception) -> str:
    text = str(exc)
    # tomlkit appends " at line L col C"; the position is already in the field.
    return "invalid TOML: " + text.split(" at line ", 1)[0]


def dumps(document: Any, intended: dict[str, Any], file: str, like: str = "") -> str:
    """The edited text, after checking that it means exactly ``intended``.

    Lines tomlkit adds end in "\n"; a file written with CRLF (``like``, the original text) keeps CRLF.
    """
    import tomlkit  # noqa: PLC0415

    text: str = tomlkit.dumps(document)
    if "\r\n" in like:
        text = re.sub(r"(?<!\r)\n", "\r\n", text)
    if tomllib.loads(text) != intended:
        raise CdictkError(
            file, "", "cannot edit this file safely (the edit would change other settings); nothing written"
        )
    return text


def edit(document: Any, old: dict[str, Any], new: dict[str, Any], file: str, like: str = "") -> str:
    """``document`` (holding ``old``) changed to hold ``new``, as text checked to mean exactly that."""
    try:
        sync(document, old, new)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # tomlkit refusing a construct
        raise CdictkError(file, "", f"cannot edit this file safely ({exc}); nothing written") from None
    return dumps(document, new, file, like)


def sync(container: Any, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Make the tomlkit ``container`` (holding ``old``) hold ``new``, touching only what differs."""
    import tomlkit  # noqa: PLC0415

    for key in [key for key in old if key not in new]:
        del container[key]
    for key, value in new.items():
        if key not in old:
            _add(container, key, value)
        elif isinstance(value, dict) and isinstance(old[key], dict):
            sync(container[key], old[key], value)
        elif (
            isinstance(value, list)
            and isinstance(old[key], list)
            and _edit_array(container[key], old[key], value)
        ):
            pass
        elif value != old[key]:
            container[key] = tomlkit.item(value)


def _edit_array(array: Any, old: list[Any], new: list[Any]) -> bool:
    """Append to or delete from a tomlkit array in place, keeping its layout and comments (a
    multi-line ``imports`` list); False when the change is not one of those two."""
    if not hasattr(array, "append"):
        return False
    if new[: len(old)] == old:
        for item in new[len(old) :]:
            array.append(item)
        return True
    if len(new) < len(old) and all(item in old for item in new):
        keep = list(new)
        for index in reversed(range(len(old))):
            if keep and old[index] == keep[-1]:
                keep.pop()
            else:
                del array[index]
        return not keep
    return False


def _add(container: Any, key: str, value: Any) -> None:
    import tomlkit  # noqa: PLC0415
    from tomlkit.items import AoT, InlineTable, Table  # noqa: PLC0415

    if isinstance(container, InlineTable):
        container[key] = _inline(value)  # an inline table can only hold inline values
        return
    if isinstance(value, dict):
        # A table that only holds tables is written as their headers alone ([a.b.c], no empty [a]).
        table = tomlkit.table(is_super_table=bool(value) and all(isinstance(v, dict) for v in value.values()))
        for sub_key, sub_value in value.items():
            _add(table, sub_key, sub_value)
        container.add(key, table)
        return
    item = tomlkit.item(value)
    siblings = [v for k, v in _body(container) if k is not None and not isinstance(v, (Table, AoT))]
    if siblings and isinstance(container, Table):
        # tomlkit prefixes the table's own indent: keep the new key in line with its siblings.
        own = container.trivia.indent
        indent = siblings[-1].trivia.indent
        item.trivia.indent = indent[len(own) :] if indent.startswith(own) else indent
    container.add(key, item)


def _inline(value: Any) -> Any:
    import tomlkit  # noqa: PLC0415

    if not isinstance(value, dict):
        return tomlkit.item(value)
    table = tomlkit.inline_table()
    for key, item in value.items():
        table[key] = _inline(item)
    return table


def _body(container: Any) -> list[tuple[Any, Any]]:
    value = getattr(container, "value", container)
    body: list[tuple[Any, Any]] = getattr(value, "body", [])
    return body
