"""The spec model -> deterministic YAML or JSON.

Fields come in the spec's order and are left out when the reference library leaves them out. YAML
starts with ``---`` (as the library writes it) and quotes every string that a YAML 1.1 reader would
take for something else, so ``name: "0"``, ``"yes"`` or ``"0660"`` reach the Go library as strings.
"""

from __future__ import annotations

from cdictk.cdi.model import FIELDS, Kind, Omit, Spec

TYPE_CHECKING = False  # typing imports re: keep both off the dump path
if TYPE_CHECKING:
    from typing import Any


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
    import json  # noqa: PLC0415 (lazy: the YAML path never needs it)

    return json.dumps(to_data(spec), indent=2, ensure_ascii=False) + "\n"


def dump_yaml(spec: Spec) -> str:
    """Block-style YAML, through our own emitter (:mod:`cdictk.cdi.yamlemit`), or PyYAML's for a spec
    that holds what ours does not write (non-ASCII, line breaks, long strings): the same bytes either way.
    """
    from cdictk.cdi.yamlemit import emit  # noqa: PLC0415 (lazy: the JSON path never needs it)

    data = to_data(spec)
    text = emit(data)
    return text if text is not None else emit_with_pyyaml(data)


def emit_with_pyyaml(data: dict[str, Any]) -> str:
    """``data`` as block-style YAML through PyYAML's C emitter (its Python one without libyaml).

    The events are built here rather than by PyYAML's representer, which is written in Python and took
    two thirds of the time (a 21-device spec: 9.7 ms -> 4.2 ms, byte for byte the same output).
    """
    import yaml  # noqa: PLC0415 (lazy: importing PyYAML costs about 15 ms)
    from yaml import events  # noqa: PLC0415

    from cdictk.cdi.yamlscalar import is_ambiguous  # noqa: PLC0415

    out: list[Any] = [events.StreamStartEvent(), events.DocumentStartEvent(explicit=True)]
    # PyYAML's own plain-scalar rules, on top of ours: it retypes a few strings Go's reader keeps as
    # text (0x_, =, <<), and a spec must read the same in both.
    resolvers = yaml.resolver.Resolver.yaml_implicit_resolvers

    def retyped_by_pyyaml(value: str) -> bool:
        return any(pattern.match(value) for _tag, pattern in resolvers.get(value[0], ()))

    def scalar(value: str) -> None:
        if not value:  # plain, it would read back as null
            out.append(events.ScalarEvent(None, None, (False, True), value))
        elif is_ambiguous(value) or retyped_by_pyyaml(value):
            out.append(events.ScalarEvent(None, None, (False, True), value, style='"'))
        else:
            out.append(events.ScalarEvent(None, None, (True, True), value))

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            out.append(events.MappingStartEvent(None, None, True, flow_style=False))
            for key, item in value.items():
                scalar(key)
                walk(item)
            out.append(events.MappingEndEvent())
        elif isinstance(value, list):
            out.append(events.SequenceStartEvent(None, None, True, flow_style=False))
            for item in value:
                walk(item)
            out.append(events.SequenceEndEvent())
        elif isinstance(value, str):
            scalar(value)
        elif isinstance(value, bool):
            out.append(events.ScalarEvent(None, None, (True, False), "true" if value else "false"))
        else:  # int: the model has no other scalar type
            out.append(events.ScalarEvent(None, None, (True, False), str(value)))

    walk(data)
    out += [events.DocumentEndEvent(), events.StreamEndEvent()]
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text: str = yaml.emit(out, Dumper=dumper, allow_unicode=True, width=1 << 16)
    return text


def dump(spec: Spec, fmt: str) -> str:
    """``fmt`` is "yaml" or "json"."""
    if fmt == "json":
        return dump_json(spec)
    if fmt == "yaml":
        return dump_yaml(spec)
    raise ValueError(f"unknown format {fmt!r}")
