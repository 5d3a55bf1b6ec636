"""Editing a TOML config without disturbing what we do not change.

The change is computed on plain dicts first (what the config must mean afterwards); ``sync`` then applies
the difference to the tomlkit document, so comments, order and layout outside the changed tables stay
byte for byte. Finally the result is parsed back with tomllib and compared with the intended dicts:
tomlkit can move a key into a new table when it adds one under root-level dotted keys, and a config that
means something else than intended must never be written. It is parsed back with tomlkit too, which
rejects some valid layouts: a file cdictk writes must stay one that cdictk can edit (and undo).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import ParseError, TOMLKitError
from tomlkit.items import AoT, InlineTable, Null, Table, Whitespace

from cdictk.startpath.helpers.errors import CdictkError

MAX_CONFIG_BYTES = 16 << 20


def read(text: str, file: str) -> dict[str, Any]:
    """The plain data of ``text``, read as the TOML spec says; what is wrong is one line naming the
    line and column."""
    if len(text) > MAX_CONFIG_BYTES:
        raise CdictkError(file, "", f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _invalid(text, file, exc) from exc
    except (ValueError, RecursionError) as exc:  # past tomllib's limits: an integer's digits, nesting
        raise _past_limits(text, file) from exc


def _past_limits(text: str, file: str) -> CdictkError:
    """The error for TOML past tomllib's limits, placed by tomlkit (tomllib gives no place for these)."""
    try:
        tomlkit.parse(text)
    except ParseError as exc:
        return CdictkError(f"{file}:{exc.line}:{exc.col + 1}", "", f"invalid TOML: {_reason(exc)}")
    except (TOMLKitError, RecursionError):
        pass
    return CdictkError(
        file, "", "invalid TOML: past the reader's limits (nested too deeply, or too many digits)"
    )


def load(text: str, file: str) -> tuple[Any, dict[str, Any]]:
    """The tomlkit document and the plain data of ``text``. The document is None for valid TOML that
    tomlkit cannot read (some layouts of tables spread over the file): :func:`edit` then changes what it
    can without it."""
    data = read(text, file)
    try:
        return tomlkit.parse(text), data
    except (TOMLKitError, RecursionError):
        return None, data


def _unreadable(text: str, file: str) -> CdictkError:
    """Why tomlkit cannot read ``text``, valid TOML: say so, not "invalid"."""
    try:
        tomlkit.parse(text)
    except (TOMLKitError, RecursionError) as exc:
        # tomlkit counts columns from 0; editors and compilers count from 1.
        where = f"{file}:{exc.line}:{exc.col + 1}" if isinstance(exc, ParseError) else file
        reason = f"tomlkit cannot read it: {_reason(exc).rstrip('.')}"
    else:
        where, reason = file, "tomlkit cannot read it"
    return CdictkError(where, "", f"cannot edit this file safely ({reason}); nothing written")


def _invalid(text: str, file: str, exc: tomllib.TOMLDecodeError) -> CdictkError:
    """``file:line:column: invalid TOML: <reason>``, placed where tomllib found the problem."""
    at = re.compile(r"\s*\((?:at line (\d+), column (\d+)|at end of document)\)")
    match = at.search(str(exc))
    if match is None:
        where = file
    elif match.group(1):
        where = f"{file}:{match.group(1)}:{match.group(2)}"
    else:  # the end of the text: its last line, after its last character
        last = text.rsplit("\n", 1)[-1]
        where = f"{file}:{text.count(chr(10)) + 1}:{len(last) + 1}"
    reason = at.sub("", str(exc))
    if reason.startswith(("Cannot overwrite a value", "Cannot declare")):
        # tomllib names no key given twice, and a table given twice by its path; tomlkit names the key.
        reason = _duplicate(text) or reason
    return CdictkError(where, "", f"invalid TOML: {reason}")


def _duplicate(text: str) -> str | None:
    """'duplicate key "NAME"' when tomlkit stops on a key given twice."""
    try:
        tomlkit.parse(text)
    except (TOMLKitError, RecursionError) as exc:
        duplicate = re.match(r'Key "(.*)" already exists', _reason(exc))
        return f'duplicate key "{duplicate.group(1)}"' if duplicate else None
    return None


def _reason(exc: Exception) -> str:
    # tomlkit appends " at line L col C"; the position is already in the field.
    return str(exc).split(" at line ", 1)[0]


def dumps(document: Any, intended: dict[str, Any], file: str, like: str = "") -> str:
    """The edited text, after checking that it means exactly ``intended``.

    Lines tomlkit adds end in "\n"; a file written with CRLF (``like``, the original text) keeps CRLF.
    """
    text: str = tomlkit.dumps(document)
    if "\r\n" in like:
        text = re.sub(r"(?<!\r)\n", "\r\n", text)
    try:
        means = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        means = None  # tomlkit can give a value the name of a [table] further down: not TOML at all
    if means != intended:
        raise CdictkError(
            file, "", "cannot edit this file safely (the edit would change other settings); nothing written"
        )
    try:
        tomlkit.parse(text)
    except TOMLKitError as exc:
        # Valid TOML, but a later run (--remove included) could not edit it.
        raise CdictkError(
            file, "", "cannot edit this file safely (tomlkit could not read the result back); nothing written"
        ) from exc
    return text


def edit(document: Any, old: dict[str, Any], new: dict[str, Any], file: str, like: str = "") -> str:
    """``document`` (holding ``old``) changed to hold ``new``, as text checked to mean exactly that.

    Without a document (``like``, the file's text, is valid TOML that tomlkit cannot read), only values
    at the top, before the first table, can be changed: line by line (:func:`edit_top_level`).
    """
    if document is None:
        text = edit_top_level(like, old, new)
        if text is None:
            raise _unreadable(like, file)
        return text
    try:
        sync(document, old, new)
    except (ValueError, TypeError, KeyError, AttributeError, TOMLKitError) as exc:  # tomlkit refusing
        raise CdictkError(file, "", f"cannot edit this file safely ({exc}); nothing written") from exc
    return dumps(document, new, file, like)


def sync(container: Any, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Make the tomlkit ``container`` (holding ``old``) hold ``new``, touching only what differs."""
    _sync([(None, container)], old, new)


def _sync(parts: list[tuple[Any, Any]], old: dict[str, Any], new: dict[str, Any]) -> None:
    """``sync`` for one table written in several ``parts`` ((key, tomlkit container) pairs).

    A hand-edited file spreads a table over the file: sub-tables before their super-table, other tables
    in between, dotted keys. tomlkit's merged view of such a table (OutOfOrderTableProxy) cannot add a
    key, so each edit goes to the one part that can hold it.
    """
    for key in [key for key in old if key not in new]:
        for container in _holding(parts, key):
            del container[key]
    for key, value in new.items():
        if key not in old:
            _add(parts, key, value)
            continue
        holding = _holding(parts, key)
        if isinstance(value, dict) and isinstance(old[key], dict):
            _sync([entry for container in holding for entry in _entries(container, key)], old[key], value)
        elif (
            isinstance(value, list)
            and isinstance(old[key], list)
            and _edit_array(holding[0][key], old[key], value)
        ):
            pass
        elif value != old[key]:
            holding[0][key] = tomlkit.item(value)


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


def _add(parts: list[tuple[Any, Any]], key: str, value: Any) -> None:
    inline = [container for _, container in parts if isinstance(container, InlineTable)]
    if inline:
        inline[0][key] = _inline(value)  # an inline table is written whole, and holds only inline values
        return
    dotted = [container for name, container in parts if name is not None and name.is_dotted()]
    headed = [container for name, container in parts if name is None or not name.is_dotted()]
    concrete = [
        container for container in headed if not (isinstance(container, Table) and container.is_super_table())
    ]
    if isinstance(value, dict) and headed:
        # A table that only holds tables is written as their headers alone ([a.b.c], no empty [a]).
        table = tomlkit.table(is_super_table=bool(value) and all(isinstance(v, dict) for v in value.values()))
        for sub_key, sub_value in value.items():
            _add([(None, table)], sub_key, sub_value)
        # After the table's own [header] section, where a reader looks for it.
        target = (concrete or headed)[-1]
        # Another header may follow a table part: keep the blank line before it (none follows the document).
        blank = _blank_after(target) if isinstance(target, Table) else None
        target.add(key, table)
        if blank is not None:
            table.add(tomlkit.ws(blank.as_string()))
        return
    # A table has one [header] at most, so a key goes there; else beside its dotted siblings; else a
    # header-less super-table gets the [header] (placed before its sub-tables, as TOML reads best).
    # Under a dotted key, a header would not be inside the table: a new table is written as dotted keys.
    if concrete:
        target = concrete[0]
    elif dotted:
        direct = [part for part in dotted if any(not isinstance(item, Table) for _, item in _body(part))]
        target = (direct or dotted)[-1]
    else:
        target = headed[0]
        # tomlkit gave it the trivia of the sub-table header it was parsed from: not this header's comment.
        target.trivia.comment_ws = target.trivia.comment = ""
    indent = _indent(target)
    for path, leaf in _leaves(value):
        item = _inline(leaf)
        if indent is not None and isinstance(target, Table):
            # tomlkit prefixes the table's own indent: keep the new key in line with its siblings.
            own = target.trivia.indent
            item.trivia.indent = indent[len(own) :] if indent.startswith(own) else indent
        # A plain name, not a one-part Key: given a Key, tomlkit's Table.add reads the value back
        # unwrapped, and a bool has no trivia.
        target.add(tomlkit.key([key, *path]) if path else key, item)


def _leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) for each value a dotted key can hold: dicts are spelled out, down to an empty one."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    else:
        yield path, value


def _indent(container: Any) -> str | None:
    """The indent of the last key written in ``container``'s own section (dotted keys included)."""
    for name, item in reversed(_body(container)):
        if name is None or isinstance(item, AoT):
            continue
        if not isinstance(item, Table):
            indent: str = item.trivia.indent
            return indent
        if name.is_dotted() and (found := _indent(item)) is not None:
            return found
    return None


def _blank_after(container: Any) -> Any:
    """The whitespace item that ends ``container``'s text (the blank line before a next header), or None."""
    items = [item for _, item in _body(container) if not isinstance(item, Null)]
    if items and isinstance(items[-1], Whitespace):
        return items[-1]
    if items and isinstance(items[-1], Table):
        return _blank_after(items[-1])
    return None


def _holding(parts: list[tuple[Any, Any]], key: str) -> list[Any]:
    """The containers among ``parts`` that have ``key`` written in them."""
    return [container for _, container in parts if _entries(container, key)]


def _entries(container: Any, key: str) -> list[tuple[Any, Any]]:
    return [(name, item) for name, item in _body(container) if name is not None and name.key == key]


def _inline(value: Any) -> Any:
    if not isinstance(value, dict):
        return tomlkit.item(value)
    table = tomlkit.inline_table()
    for key, item in value.items():
        table[key] = _inline(item)
    return table


def _body(container: Any) -> list[tuple[Any, Any]]:
    body: list[tuple[Any, Any]] = (container if isinstance(container, Container) else container.value).body
    return body


def edit_top_level(text: str, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """``text`` (meaning ``old``) changed to mean ``new`` by adding, replacing or deleting whole lines
    of top-level values (``imports``, ``version``); None for any other change, or when a value spans
    lines or the result would mean anything else.

    What configure asks of a main config it keeps its CRI table out of (the drop-in) is exactly this,
    and it needs no parser that keeps layout: the tables below are not touched at all.
    """
    changed = [key for key in {**old, **new} if old.get(key, _ABSENT) != new.get(key, _ABSENT)]
    if any(isinstance(old.get(key), dict) or isinstance(new.get(key), dict) for key in changed):
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    end = _top_level_end(lines)
    added: list[str] = []
    for key in changed:
        line = tomlkit.dumps({key: new[key]}).rstrip("\n") + newline if key in new else ""
        if key not in old:
            added.append(line)
            continue
        at = [i for i in range(end) if _is_line_of(lines[i], key, old[key])]
        if len(at) != 1:
            return None  # written over several lines, or not found alone on one
        indent = lines[at[0]][: len(lines[at[0]]) - len(lines[at[0]].lstrip())]
        lines[at[0]] = indent + line if line else ""
    # New values go after the last top-level value, before the comments that lead into the first table.
    place = end
    while place > 0 and (not lines[place - 1].strip() or lines[place - 1].lstrip().startswith("#")):
        place -= 1
    lines[place:place] = added  # in the order of ``new`` ({**old, **new} lists new keys so)
    result = "".join(lines)
    try:
        means = tomllib.loads(result)
    except (ValueError, RecursionError):
        return None
    return result if means == new else None


_ABSENT = object()


def _top_level_end(lines: list[str]) -> int:
    """The index of the first table header line (len(lines) when there is none): the first line that
    starts with "[" and before which the text parses as TOML."""
    for index, line in enumerate(lines):
        if line.lstrip().startswith("["):
            try:
                tomllib.loads("".join(lines[:index]))
            except (ValueError, RecursionError):
                continue  # inside a value spanning lines
            return index
    return len(lines)


def _is_line_of(line: str, key: str, value: Any) -> bool:
    """Whether ``line`` alone says ``key = value``."""
    try:
        return tomllib.loads(line) == {key: value}
    except (ValueError, RecursionError):
        return False
