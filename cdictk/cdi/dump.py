"""The spec model -> deterministic YAML or JSON.

Fields come in the spec's order and are left out when the reference library leaves them out. YAML
starts with ``---`` (as the library writes it) and quotes every string that a YAML 1.1 reader would
take for something else, so ``name: "0"``, ``"yes"`` or ``"0660"`` reach the Go library as strings.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from cdictk.cdi.model import Kind, Spec, spec_fields
from cdictk.libyaml import safe_dumper
from cdictk.yamlscalar import is_ambiguous

_STR_TAG = "tag:yaml.org,2002:str"


def to_data(obj: Any) -> dict[str, Any]:
    """A model object as plain dicts and lists, keys in spec order."""
    out: dict[str, Any] = {}
    for spec_field in spec_fields(type(obj)):
        value = getattr(obj, spec_field.attr)
        if not spec_field.written(value):
            continue
        if spec_field.kind is Kind.OBJ:
            value = to_data(value)
        elif spec_field.kind is Kind.OBJS:
            value = [to_data(item) for item in value]
        elif spec_field.kind in (Kind.STRS, Kind.UINT32S, Kind.STRMAP):
            value = value.copy()
        out[spec_field.key] = value
    return out


def dump_json(spec: Spec) -> str:
    return json.dumps(to_data(spec), indent=2, ensure_ascii=False) + "\n"


def dump_yaml(spec: Spec) -> str:
    """Block-style YAML with ``---`` first, keys in the spec's order, each scalar on its line."""
    import yaml  # noqa: PLC0415 - the spec cache uses to_data on JSON specs alone, without PyYAML

    text: str = yaml.dump(
        to_data(spec),
        Dumper=_dumper(),
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,
    )
    return text


@functools.cache
def _dumper() -> Any:
    """PyYAML's C emitter, with strings double-quoted wherever a reader could take them for something
    else: by YAML 1.1 as Go's reader applies it (``y``, ``0660``, ``1_000``: :func:`is_ambiguous`) or
    by PyYAML's own resolver."""
    import yaml  # noqa: PLC0415 - as dump_yaml's: JSON-only callers never load PyYAML

    safe_dumper()  # one line where PyYAML lacks libyaml, not an AttributeError

    class SpecDumper(yaml.CSafeDumper):
        def represent_str(self, data: str) -> yaml.ScalarNode:
            retyped = self.resolve(yaml.ScalarNode, data, (True, False)) != _STR_TAG  # type: ignore[no-untyped-call]
            style = '"' if data and (retyped or is_ambiguous(data)) else None
            return self.represent_scalar(_STR_TAG, data, style=style)

    SpecDumper.add_representer(str, SpecDumper.represent_str)
    return SpecDumper


def dump(spec: Spec, fmt: str) -> str:
    """``spec`` as text in ``fmt``, "yaml" or "json"."""
    if fmt == "json":
        return dump_json(spec)
    if fmt == "yaml":
        return dump_yaml(spec)
    raise ValueError(f"unknown format {fmt!r}")
