"""Strict YAML: text -> plain data, on libyaml's event stream (PyYAML's C parser).

The one YAML reader of cdictk's input, specs and settings files alike. We build the values from the
events ourselves so that we can refuse what such a file never needs and a hostile one could abuse:
duplicate keys, anchors and aliases (billion-laughs expansion), explicit tags, complex keys and nesting
deeper than :data:`MAX_DEPTH` (never a RecursionError). Plain scalars are typed by YAML 1.1 rules, as
Go's YAML readers type them (the CDI reference library's, NVIDIA's device plugin's). Of several
documents only the first is read, and nothing after it is even parsed, as Go's readers do. Errors are
one :class:`CdictkError` naming the file, the field path and the line. Sizes are capped where the bytes
are read (:func:`cdictk.startpath.helpers.fsutil.read_capped`), before any parsing.
"""

from __future__ import annotations

from typing import Any

from cdictk.libyaml import safe_loader
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.yamlscalar import go_text, resolve_plain

MAX_DEPTH = 64
_STR_TAG = "tag:yaml.org,2002:str"


class _AwaitingKey:
    """Marks a mapping whose next scalar is a key."""


_KEY = _AwaitingKey()


def parse_yaml(text: str, file: str) -> Any:
    import yaml  # noqa: PLC0415 - JSON-only callers never load PyYAML

    loader = safe_loader()(text)
    try:
        return _build_document(loader, file)
    except yaml.MarkedYAMLError as exc:
        where = _line(exc.problem_mark or exc.context_mark)
        raise CdictkError(file, "", f"invalid YAML: {exc.problem or exc.context}{where}") from exc
    except yaml.YAMLError as exc:
        raise CdictkError(file, "", f"invalid YAML: {exc}") from exc
    finally:
        loader.dispose()


def _line(mark: Any) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _build_document(loader: Any, file: str) -> Any:  # a PyYAML loader; its event API is untyped
    from yaml import events  # noqa: PLC0415 - as parse_yaml's

    loader.get_event()  # stream start
    if loader.check_event(events.StreamEndEvent):
        return None
    loader.get_event()  # document start
    root = _build_value(loader, file)
    loader.get_event()  # document end; what follows is not read
    return root


def more_documents(text: str) -> bool:
    """Whether YAML ``text`` holds anything after its first document (broken YAML included), which no
    reader of specs sees; False when the first document itself does not parse."""
    import yaml  # noqa: PLC0415 - as parse_yaml's
    from yaml import events  # noqa: PLC0415 - as parse_yaml's

    loader = safe_loader()(text)
    try:
        try:
            while not loader.check_event(events.DocumentEndEvent, events.StreamEndEvent):
                loader.get_event()
            if loader.check_event(events.StreamEndEvent):
                return False
            loader.get_event()
        except yaml.YAMLError:
            return False
        try:
            return not loader.check_event(events.StreamEndEvent)
        except yaml.YAMLError:
            return True
    finally:
        loader.dispose()


def _build_value(loader: Any, file: str) -> Any:
    from yaml import events  # noqa: PLC0415 - as parse_yaml's

    stack: list[Any] = []  # open mappings and sequences, outermost first
    keys: list[Any] = []  # per open mapping: the key whose value comes next, or _KEY
    get_event = loader.get_event
    while True:
        event = get_event()
        kind = type(event)
        if kind is events.ScalarEvent:
            _refuse_anchor(event, stack, keys, file)
            tag = event.tag
            if tag is None or tag == "!":
                value: Any = resolve_plain(event.value) if event.implicit[0] else event.value
            elif tag == _STR_TAG:
                value = event.value
            else:
                raise _error(file, stack, keys, f"explicit YAML tag {tag} is not allowed", event)
        elif kind is events.MappingStartEvent or kind is events.SequenceStartEvent:
            _refuse_anchor(event, stack, keys, file)
            if event.tag is not None and event.tag != "!":
                raise _error(file, stack, keys, f"explicit YAML tag {event.tag} is not allowed", event)
            if stack and keys[-1] is _KEY:
                raise _error(file, stack, keys, "a mapping key must be a scalar", event)
            if len(stack) >= MAX_DEPTH:
                raise _error(file, stack, keys, f"nested deeper than {MAX_DEPTH} levels", event)
            stack.append({} if kind is events.MappingStartEvent else [])
            keys.append(_KEY if kind is events.MappingStartEvent else None)
            continue
        elif kind is events.MappingEndEvent or kind is events.SequenceEndEvent:
            value = stack.pop()
            keys.pop()
        elif kind is events.AliasEvent:
            raise _error(file, stack, keys, f"YAML alias *{event.anchor} is not allowed", event)
        else:
            raise _error(file, stack, keys, f"unexpected YAML event {kind.__name__}", event)

        if not stack:
            return value
        top = stack[-1]
        if type(top) is list:
            top.append(value)
            continue
        key = keys[-1]
        if key is _KEY:
            key = _mapping_key(value, file, stack, keys, event)
            if key in top:
                keys[-1] = key
                raise _error(file, stack, keys, "duplicate key", event)
            keys[-1] = key
        else:
            top[key] = value
            keys[-1] = _KEY


def _mapping_key(value: Any, file: str, stack: list[Any], keys: list[Any], event: Any) -> str:
    text = go_text(value)
    if text is not None:
        return text
    raise _error(file, stack, keys, f"mapping key {value!r} must be a string", event)


def _refuse_anchor(event: Any, stack: list[Any], keys: list[Any], file: str) -> None:
    if event.anchor is not None:
        raise _error(file, stack, keys, f"YAML anchor &{event.anchor} is not allowed", event)


def _error(file: str, stack: list[Any], keys: list[Any], reason: str, event: Any) -> CdictkError:
    path = ""
    for frame, key in zip(stack, keys, strict=True):
        if type(frame) is list:
            path += f"[{len(frame)}]"
        elif key is not _KEY:
            path += f".{key}" if path else str(key)
    return CdictkError(file, path, reason + _line(event.start_mark))
