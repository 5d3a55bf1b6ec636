"""The spec model -> deterministic YAML or JSON.

Fields come in the spec's order and are left out when the reference library leaves them out. YAML
starts with ``---`` (as the library writes it) and quotes every string that a YAML 1.1 reader would
take for something else, so ``name: "0"``, ``"yes"`` or ``"0660"`` reach the Go library as strings.
"""

from __future__ import annotations

import json
from typing import Any

from cdictk.cdi.model import FIELDS, Kind, Omit, Spec
from cdictk.cdi.yamlscalar import is_ambiguous


def to_data(obj: Any) -> dict[str, Any]:
    """A model object as plain dicts and lists, keys in spec order."""
    out: dict[str, Any] = {}
    for spec_field in FIELDS[type(obj)]:
        value = getattr(obj, spec_field.attr)
        if spec_field.omit is Omit.EMPTY and not value:
            continue
        if spec_field.omit is Omit.NONE and value is None:
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
    import yaml  # noqa: PLC0415 (lazy: the JSON path never needs PyYAML)

    return yaml.dump(
        to_data(spec),
        Dumper=_dumper_class(yaml),
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        allow_unicode=True,
        width=1 << 16,
    )


def dump(spec: Spec, fmt: str) -> str:
    """``fmt`` is "yaml" or "json"."""
    if fmt == "json":
        return dump_json(spec)
    if fmt == "yaml":
        return dump_yaml(spec)
    raise ValueError(f"unknown format {fmt!r}")


def _dumper_class(yaml: Any) -> Any:
    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

    class Dumper(base):  # type: ignore[misc,valid-type]
        pass

    def represent_str(dumper: Any, value: str) -> Any:
        style = '"' if value and is_ambiguous(value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return Dumper
