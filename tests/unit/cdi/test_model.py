"""The model's field metadata: every attribute declares its field, consistent with its Python type."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from cdictk.cdi.model import META, MODEL_CLASSES, IntelRdt, Kind, Omit, Spec, SpecField, spec_fields

PYTHON_TYPES: dict[Kind, Any] = {
    Kind.STR: str,
    Kind.INT64: int,
    Kind.UINT32: int,
    Kind.BOOL: bool,
    Kind.STRS: list[str],
    Kind.UINT32S: list[int],
    Kind.STRMAP: dict[str, str],
}


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda cls: cls.__name__)
def test_every_attribute_declares_its_field_and_its_type_fits_the_kind(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    attrs = dataclasses.fields(cls)
    assert [f.attr for f in spec_fields(cls)] == [attr.name for attr in attrs]
    for attr in attrs:
        assert META in attr.metadata, attr.name
    for field in spec_fields(cls):
        hint = hints[field.attr]
        if field.omit is Omit.NONE:  # a nil pointer in Go: None here
            assert typing.get_args(hint)[-1] is type(None), field.key
            hint = typing.get_args(hint)[0]
        if field.kind is Kind.OBJ:
            assert field.cls is hint and field.cls in MODEL_CLASSES, field.key
        elif field.kind is Kind.OBJS:
            assert typing.get_origin(hint) is list and field.cls is typing.get_args(hint)[0], field.key
            assert field.cls in MODEL_CLASSES
        else:
            assert hint == PYTHON_TYPES[field.kind] and field.cls is None, field.key


def test_every_model_class_is_listed() -> None:
    """What the decoder knows: every class a field holds, and Spec at the top."""
    held = {field.cls for cls in MODEL_CLASSES for field in spec_fields(cls) if field.cls}
    assert set(MODEL_CLASSES) == held | {Spec}


def test_written_is_the_omit_rule() -> None:
    def one(omit: Omit) -> SpecField:
        return SpecField("k", "k", Kind.STRS, omit, "0.3.0", required=False)

    assert [one(Omit.NEVER).written(v) for v in (None, [], ["x"])] == [True, True, True]
    assert [one(Omit.EMPTY).written(v) for v in (None, [], ["x"])] == [False, False, True]
    assert [one(Omit.NONE).written(v) for v in (None, [], ["x"])] == [False, True, True]
    schemata = {field.attr: field for field in spec_fields(IntelRdt)}["schemata"]
    assert schemata.written([]) and not schemata.written(None)
