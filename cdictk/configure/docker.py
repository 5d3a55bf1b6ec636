"""The Docker part of ``cdictk runtime configure``: a pure patch of ``/etc/docker/daemon.json`` text.

People keep hand-written settings in daemon.json and notice every byte a tool changes, so the patch
touches only the keys it owns: key order is kept (new keys go last in their object), the file's
indentation, line endings and trailing newline are kept, integers stay exact, non-ASCII stays as is,
and an object such as ``features`` is merged into, never replaced. When nothing would change, the
input text itself comes back so the caller can skip the write.

The document is re-emitted the way ``json.dumps`` indents it: a file laid out by hand (a short array
on one line, say) comes back in that layout after a real change. Floats keep their value but not
their spelling (``1e3`` becomes ``1000.0``); daemon.json has no float settings in practice.

Standard library only: the file writer and the CLI call this on nodes without extra packages. ``plan``
and ``inspect`` are what the engine's record (:mod:`cdictk.configure.engines`) calls.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from typing import Any

from cdictk.configure import writer
from cdictk.configure.change import Edit, Inspection, Plan, RuntimeChange, describe, shim_paths
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.strictjson import object_pairs_hook, parse_constant

MAX_DAEMON_JSON_BYTES = 16 * 1024 * 1024

# Docker refuses a daemon.json that redefines its stock runtime.
_RESERVED_RUNTIME_NAMES = frozenset({"runc"})

_DEFAULT_INDENT = "    "
_JSON_WHITESPACE = " \t\r\n"
_BOM = "\ufeff"

# Tokens that matter when pointing at a duplicate key or a bad number after the fast C parser
# refused the text without a position: strings (keys and values), brackets, colons, constants and
# numbers. The parser read everything before the problem, so that prefix tokenizes cleanly.
_TOKEN = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:]|-?Infinity|NaN|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?',
)
_FIRST_INDENT = re.compile(r"\n([ \t]+)\S")


def plan(main: writer.Current, drop_in: writer.Current | None, change: RuntimeChange) -> Plan:
    """The edit of daemon.json alone (the engine has no drop-in, so ``drop_in`` is always None)."""
    edit = Edit(main.path, configure_docker(main.text, main.path, change, _before(main.path)))
    return Plan(((main, edit),))


def _before(path: str) -> dict[str, Any] | None:
    """daemon.json as it was before cdictk first changed it (its backup), for --remove to restore."""
    data = writer.read_backup(path)
    if data is None:
        return None
    try:
        before = json.loads(data or b"{}")
    except (ValueError, RecursionError):  # not JSON, or nested too deeply: nothing to restore
        return None
    return before if isinstance(before, dict) else None


def inspect(files: Sequence[tuple[str, str]]) -> Inspection:
    """``features.cdi``, and the runtimes whose ``path`` is cdictk-runtime."""
    path, text = files[0]  # daemon.json: Docker has no drop-ins
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        return Inspection(False, (), "", f"cannot parse {path}: {exc.msg}")
    except ValueError as exc:  # an integer past Python's digit limit
        return Inspection(False, (), "", f"cannot parse {path}: {exc}")
    except RecursionError:
        return Inspection(False, (), "", f"cannot parse {path}: nested too deeply")
    if not isinstance(data, dict):
        return Inspection(False, (), "", f"{path}: not a JSON object")
    features = data.get("features")
    cdi = isinstance(features, dict) and features.get("cdi") is True
    runtimes = data.get("runtimes")
    entries = list(runtimes.values()) if isinstance(runtimes, dict) else []
    found = shim_paths(entry.get("path") for entry in entries if isinstance(entry, dict))
    return Inspection(cdi, found, describe(cdi, found))


def configure_docker(
    text: str | None, file: str, change: RuntimeChange, before: dict[str, Any] | None = None
) -> str | None:
    """New daemon.json text, or None when the file does not exist and nothing needs writing.

    Returns ``text`` itself (the same string) when nothing changes, so the caller can skip the write.
    ``text`` None means the file does not exist; empty or whitespace-only text counts as ``{}``.

    Configure (``remove`` false):
      - ``runtimes.<name>.path`` is set; other keys of that runtime (``runtimeArgs``) are kept.
      - ``set_as_default``: ``"default-runtime": <name>``.
      - ``enable_cdi``: ``features.cdi = true``, merged into an existing ``features`` object.
      - ``cdi_spec_dirs`` (when not empty): ``"cdi-spec-dirs"`` is set to exactly that list.

    Remove (``remove`` true) undoes only what configure adds, and ``set_as_default`` plays no part:
      - ``runtimes.<name>`` goes, and ``runtimes`` with it when that leaves it empty.
      - ``default-runtime`` goes when it names ``<name>``: Docker refuses a default it cannot find.
      - ``features.cdi`` and ``cdi-spec-dirs`` are left alone, since other tools may rely on CDI,
        unless asked for: with ``enable_cdi``, ``features.cdi`` goes when it is ``true`` (a ``false``
        was someone's choice, and dropping it would turn CDI on under Docker 28 and later), and
        ``features`` with it when that leaves it empty; with ``cdi_spec_dirs``, those directories
        leave the ``cdi-spec-dirs`` list, and the key goes when the list is left empty.

    Raises CdictkError for text that is not strict JSON (comments, trailing commas, duplicate keys,
    NaN/Infinity), for a top level that is not an object, for a ``runtimes``, ``runtimes.<name>`` or
    ``features`` that is not an object, for text over 16 MiB, and for an unusable ``change``.

    ``before`` is the file as it was before cdictk first changed it (its backup): what remove takes
    out is put back from there when configure had replaced it (a previous ``default-runtime``, a
    ``features.cdi`` or ``cdi-spec-dirs`` of the user's).
    """
    _check_change(change, file)
    if text is None:
        if change.remove:
            return None
        source = ""
    else:
        source = text
    bom = source.startswith(_BOM)
    body = source[1:] if bom else source
    doc = _parse(body, file)
    changed = _remove(doc, change, file, before or {}) if change.remove else _add(doc, change, file)
    if not changed:
        return text
    rendered = _render(doc, body, file, new_file=text is None)
    return _BOM + rendered if bom else rendered


def _check_change(change: RuntimeChange, file: str) -> None:
    name = change.runtime_name
    if not name:
        raise CdictkError(file, "runtimes", "the runtime name is empty")
    if name in _RESERVED_RUNTIME_NAMES:
        raise CdictkError(file, f"runtimes.{name}", f'the name "{name}" is reserved by Docker')
    if not change.remove and not os.path.isabs(change.runtime_path):
        raise CdictkError(
            file, f"runtimes.{name}.path", f'must be an absolute path, not "{change.runtime_path}"'
        )
    for directory in change.cdi_spec_dirs:
        if not os.path.isabs(directory):
            raise CdictkError(file, "cdi-spec-dirs", f'must hold absolute paths, not "{directory}"')


def _parse(text: str, file: str) -> dict[str, Any]:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DAEMON_JSON_BYTES:
        raise CdictkError(file, "", f"file is {size} bytes, over the {MAX_DAEMON_JSON_BYTES}-byte limit")
    if not text.strip(_JSON_WHITESPACE):
        return {}
    try:
        doc = json.loads(
            text,
            object_pairs_hook=object_pairs_hook,
            parse_constant=parse_constant,
            parse_float=_finite_float,
        )
    except json.JSONDecodeError as exc:
        reason, pos = _explain_syntax_error(text, exc)
        raise CdictkError(_at(file, text, pos), "", f"invalid JSON: {reason}") from exc
    except RecursionError as exc:
        raise CdictkError(file, "", "invalid JSON: nested too deeply") from exc
    except ValueError as exc:
        # Duplicate keys, NaN and out-of-range numbers come from our hooks without a position, so
        # look for the problem the slow way, in the error path only.
        located = _locate_problem(text)
        if located is None:
            raise CdictkError(file, "", f"invalid JSON: {exc}") from exc
        reason, pos = located
        raise CdictkError(_at(file, text, pos), "", f"invalid JSON: {reason}") from exc
    if not isinstance(doc, dict):
        start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
        raise CdictkError(
            _at(file, text, start), "", f"the top level must be a JSON object, not {_kind(doc)}"
        )
    return doc


def _finite_float(spelling: str) -> float:
    # Python reads 1e400 as inf and would write it back as Infinity, which no JSON reader accepts.
    value = float(spelling)
    if not math.isfinite(value):
        raise ValueError(f"number {_shorten(spelling)} is out of range")
    return value


def _explain_syntax_error(text: str, exc: json.JSONDecodeError) -> tuple[str, int]:
    pos = exc.pos
    if text.startswith(("//", "/*", "#"), pos):
        return "comments are not allowed", pos
    if text[pos : pos + 1] in ("}", "]"):
        before = text[:pos].rstrip(_JSON_WHITESPACE)
        if before.endswith(","):
            return "trailing comma", len(before) - 1
    return exc.msg, pos


def _locate_problem(text: str) -> tuple[str, int] | None:
    """The first duplicate key, NaN/Infinity or out-of-range number in ``text``, and its offset."""
    # One entry per open bracket: the keys seen so far for an object, None for an array.
    stack: list[set[str] | None] = []
    last_string: tuple[str, int] | None = None
    for match in _TOKEN.finditer(text):
        lexeme, pos = match.group(), match.start()
        if lexeme.startswith('"'):
            last_string = (lexeme, pos)
            continue
        if lexeme == ":" and last_string is not None and stack and stack[-1] is not None:
            key = json.loads(last_string[0])
            if key in stack[-1]:
                return f'duplicate key "{key}"', last_string[1]
            stack[-1].add(key)
        elif lexeme == "{":
            stack.append(set())
        elif lexeme == "[":
            stack.append(None)
        elif lexeme in ("}", "]"):
            if stack:
                stack.pop()
        elif lexeme in ("NaN", "Infinity", "-Infinity"):
            return f"{lexeme} is not valid JSON", pos
        elif lexeme[-1].isdigit():
            problem = _number_problem(lexeme)
            if problem:
                return problem, pos
        last_string = None
    return None


def _number_problem(lexeme: str) -> str | None:
    if any(c in lexeme for c in ".eE"):
        return None if math.isfinite(float(lexeme)) else f"number {_shorten(lexeme)} is out of range"
    try:
        int(lexeme)
    except ValueError:
        # Python caps the digits of an integer it reads (sys.get_int_max_str_digits).
        return f"integer {_shorten(lexeme)} has too many digits"
    return None


def _shorten(spelling: str) -> str:
    return spelling if len(spelling) <= 24 else spelling[:20] + "..."


def _at(file: str, text: str, pos: int) -> str:
    """``file:line:column`` of offset ``pos``, the form editors and compilers use."""
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return f"{file}:{line}:{column}"


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def _add(doc: dict[str, Any], change: RuntimeChange, file: str) -> bool:
    name = change.runtime_name
    changed = False
    runtimes = _object_field(doc, "runtimes", file)
    if runtimes is None:
        runtimes = doc["runtimes"] = {}
        changed = True
    runtime = _object_field(runtimes, name, file, f"runtimes.{name}")
    if runtime is None:
        runtime = runtimes[name] = {}
        changed = True
    changed |= _set(runtime, "path", change.runtime_path)
    if change.set_as_default:
        changed |= _set(doc, "default-runtime", name)
    if change.enable_cdi:
        features = _object_field(doc, "features", file)
        if features is None:
            features = doc["features"] = {}
            changed = True
        changed |= _set(features, "cdi", True)
    if change.cdi_spec_dirs:
        changed |= _set(doc, "cdi-spec-dirs", list(change.cdi_spec_dirs))
    return changed


def _remove(doc: dict[str, Any], change: RuntimeChange, file: str, before: dict[str, Any]) -> bool:
    name = change.runtime_name
    changed = _restore(doc, change, before)
    runtimes = _object_field(doc, "runtimes", file)
    if runtimes is not None and name in runtimes:
        del runtimes[name]
        changed = True
        if not runtimes:
            del doc["runtimes"]
    if doc.get("default-runtime") == name:
        del doc["default-runtime"]
        changed = True
    old_features = before.get("features")
    had_cdi = isinstance(old_features, dict) and "cdi" in old_features
    if change.enable_cdi and not had_cdi:
        features = _object_field(doc, "features", file)
        if features is not None and features.get("cdi") is True:
            del features["cdi"]
            changed = True
            if not features:
                del doc["features"]
    dirs = doc.get("cdi-spec-dirs")
    if change.cdi_spec_dirs and isinstance(dirs, list) and not isinstance(before.get("cdi-spec-dirs"), list):
        kept = [entry for entry in dirs if not (isinstance(entry, str) and entry in change.cdi_spec_dirs)]
        if len(kept) != len(dirs):
            changed = True
            if kept:
                doc["cdi-spec-dirs"] = kept
            else:
                del doc["cdi-spec-dirs"]
    return changed


def _restore(doc: dict[str, Any], change: RuntimeChange, before: dict[str, Any]) -> bool:
    """Put back what configure replaced, from the backup; the rest of remove then finds nothing of
    ours there to take out."""
    changed = False
    old_default = before.get("default-runtime")
    ours = doc.get("default-runtime") == change.runtime_name
    if ours and isinstance(old_default, str) and old_default != change.runtime_name:
        changed |= _set(doc, "default-runtime", old_default)
    old_features = before.get("features")
    features = doc.get("features")
    had_cdi = isinstance(old_features, dict) and "cdi" in old_features
    if change.enable_cdi and had_cdi and isinstance(features, dict) and isinstance(old_features, dict):
        changed |= _set(features, "cdi", old_features["cdi"])
    old_dirs = before.get("cdi-spec-dirs")
    if change.cdi_spec_dirs and isinstance(old_dirs, list):
        changed |= _set(doc, "cdi-spec-dirs", old_dirs)
    return changed


def _object_field(
    obj: dict[str, Any], key: str, file: str, field: str | None = None
) -> dict[str, Any] | None:
    # Docker reads null as an absent map, and so do we: configure fills it in place.
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CdictkError(file, field or key, "is not an object")
    return value


def _set(obj: dict[str, Any], key: str, value: str | bool | list[str]) -> bool:
    """Set ``obj[key]``, keeping the key's place; True when that changes the document."""
    old = obj.get(key)
    # A type check as well as ==, since 1 == True in Python but not in JSON.
    if key in obj and type(old) is type(value) and old == value:
        return False
    obj[key] = value
    return True


def _render(doc: dict[str, Any], original: str, file: str, *, new_file: bool) -> str:
    match = _FIRST_INDENT.search(original)
    indent = match.group(1) if match else _DEFAULT_INDENT
    try:
        rendered = json.dumps(doc, indent=indent, ensure_ascii=False)
    except RecursionError as exc:
        raise CdictkError(file, "", "nested too deeply to write back") from exc
    # Safe on the whole text: json.dumps escapes newlines inside strings.
    newline = "\r\n" if "\r\n" in original else "\n"
    if newline != "\n":
        rendered = rendered.replace("\n", newline)
    if new_file or not original.strip(_JSON_WHITESPACE) or original.endswith("\n"):
        rendered += newline
    return rendered
