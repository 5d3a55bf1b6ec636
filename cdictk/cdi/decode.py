"""Parsed YAML/JSON data -> the spec model, strictly.

Unknown keys are errors, as in the reference library. Field names are case-sensitive (the Go library
also takes ``CDIVersion``; we name the right spelling instead). Where the Go library coerces a number or
a boolean into a string field (``name: 0``), so do we, with the same result, and a date is its text as
written, as in Go; a float in a string field is refused rather than guessed at, because Go's rendering
of it is not what the author wrote (``1.0`` becomes "1"). As in Go, a null value means the field is
absent, a null in a list of strings or numbers or an annotation's null value is "" or 0 (``cdictk cdi
validate`` warns), and a float that is a whole number fills an integer field (``major: 1.0``).
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from cdictk.cdi.model import MODEL_CLASSES, Kind, Spec, SpecField, spec_fields
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.yamlscalar import Timestamp, go_text

_RANGES = {Kind.INT64: (-(1 << 63), (1 << 63) - 1), Kind.UINT32: (0, (1 << 32) - 1)}

_BY_KEY: dict[type, dict[str, SpecField]] = {
    cls: {f.key: f for f in spec_fields(cls)} for cls in MODEL_CLASSES
}
_REMOVED = {"enableCMT": "1.1.0", "enableMBM": "1.1.0"}

T = TypeVar("T")


def decode_spec(data: Any, file: str) -> Spec:
    """Build a Spec from parsed data; raises CdictkError naming ``file`` and the field path."""
    if data is None:
        raise CdictkError(file, "", "no spec data (the document is empty)")
    if not isinstance(data, dict):
        raise CdictkError(file, "", f"expected a mapping at the top level, got {describe(data)}")
    return _decode_obj(Spec, data, "", file)


def describe(value: Any) -> str:
    """A value's type, in words for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, Timestamp):
        return f"the date {value.text}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _decode_obj(cls: type[T], data: dict[str, Any], path: str, file: str) -> T:
    fields = _BY_KEY[cls]
    obj = cls()
    for key, value in data.items():
        spec_field = fields.get(key)
        if spec_field is None:
            raise CdictkError(file, _join(path, key), _unknown_field_reason(key, fields))
        if value is None:
            continue
        setattr(obj, spec_field.attr, _decode_value(spec_field, value, _join(path, key), file))
    return obj


def _unknown_field_reason(key: str, fields: dict[str, SpecField]) -> str:
    if key in _REMOVED:
        return f"unknown field (removed in cdiVersion {_REMOVED[key]})"
    for known in fields:
        if known.lower() == key.lower():
            return f'unknown field (field names are case-sensitive: use "{known}")'
    return f"unknown field (expected one of: {', '.join(fields)})"


def _decode_value(spec_field: SpecField, value: Any, path: str, file: str) -> Any:
    kind = spec_field.kind
    if kind is Kind.STR:
        return _as_str(value, path, file)
    if kind is Kind.INT64 or kind is Kind.UINT32:
        return _as_int(value, kind, path, file)
    if kind is Kind.BOOL:
        if not isinstance(value, bool):
            raise CdictkError(file, path, f"expected {kind.value}, got {describe(value)}")
        return value
    if kind is Kind.OBJ:
        if not isinstance(value, dict):
            raise CdictkError(file, path, f"expected a mapping, got {describe(value)}")
        return _decode_obj(_child_class(spec_field), value, path, file)
    # A null where Go wants a string or a number leaves its zero value there: "" or 0.
    if kind is Kind.STRMAP:
        if not isinstance(value, dict):
            raise CdictkError(file, path, f"expected {kind.value}, got {describe(value)}")
        return {
            key: "" if item is None else _as_str(item, _join(path, key), file) for key, item in value.items()
        }
    if not isinstance(value, list):
        raise CdictkError(file, path, f"expected {kind.value}, got {describe(value)}")
    if kind is Kind.STRS:
        return ["" if item is None else _as_str(item, f"{path}[{i}]", file) for i, item in enumerate(value)]
    if kind is Kind.UINT32S:
        return [
            0 if item is None else _as_int(item, Kind.UINT32, f"{path}[{i}]", file)
            for i, item in enumerate(value)
        ]
    # Kind.OBJS
    cls = _child_class(spec_field)
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise CdictkError(file, f"{path}[{i}]", f"expected a mapping, got {describe(item)}")
        items.append(_decode_obj(cls, item, f"{path}[{i}]", file))
    return items


def _as_str(value: Any, path: str, file: str) -> str:
    text = go_text(value)
    if text is not None:
        return text
    if isinstance(value, float):
        raise CdictkError(file, path, f"expected a string, got {describe(value)}: quote it")
    raise CdictkError(file, path, f"expected a string, got {describe(value)}")


def _child_class(spec_field: SpecField) -> type[Any]:
    if spec_field.cls is None:  # a mistake in the model, not in the input
        raise TypeError(f"field {spec_field.key} of kind {spec_field.kind} names no class")
    return spec_field.cls


def _as_int(value: Any, kind: Kind, path: str, file: str) -> int:
    low, high = _RANGES[kind]
    if (
        isinstance(value, float)
        and value.is_integer()
        and not (kind is Kind.UINT32 and math.copysign(1, value) < 0)
    ):
        # Go's YAML reader hands the float to encoding/json as "1", which an integer field takes
        # ("-0" is no unsigned integer to it).
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CdictkError(file, path, f"expected {kind.value}, got {describe(value)}")
    if not low <= value <= high:
        raise CdictkError(file, path, f"{value} is out of range ({low} to {high})")
    return value
