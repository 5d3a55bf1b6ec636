"""Validation against our JSON schema (``schemas/cdi-spec.schema.json``).

The schema checks the document as written, before any coercion, and is stricter than the runtimes;
``cdictk cdi validate`` reports its findings next to the library rules. jsonschema is imported here
only, and only when a command validates.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

from cdictk.startpath.helpers.errors import Problem

SCHEMA_FILE = "cdi-spec.schema.json"


def load_schema() -> dict[str, Any]:
    text = resources.files("cdictk.cdi").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every local ``#/$defs/...`` reference replaced by its definition.

    jsonschema resolves each ``$ref`` anew for every instance it checks, which doubled the time of a
    large spec's check. Our schema has no recursive definitions.
    """
    defs = schema.get("$defs", {})

    def expand(node: Any, depth: int) -> Any:
        if depth > 32:
            raise ValueError("schema definitions nest too deeply (recursive $ref?)")
        if isinstance(node, list):
            return [expand(item, depth + 1) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        rest = {key: expand(value, depth + 1) for key, value in node.items() if key not in ("$ref", "$defs")}
        if ref is None:
            return rest
        if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
            raise ValueError(f"only local #/$defs/ references are supported, not {ref!r}")
        target = expand(defs[ref.removeprefix("#/$defs/")], depth + 1)
        if not rest:
            return target
        if rest.keys() & target.keys():
            return {"allOf": [target, rest]}
        return {**target, **rest}

    flat: dict[str, Any] = expand(schema, 0)
    return flat


@functools.cache
def _validator() -> Any:
    import jsonschema  # noqa: PLC0415 - slow to import; `cdictk info` checks specs without it

    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(inline_refs(schema))


def field_path(parts: Iterable[str | int]) -> str:
    """``["devices", 0, "name"]`` -> ``devices[0].name``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def schema_problems(document: Any, file: str) -> list[Problem]:
    """Every place where ``document`` does not match the schema, in document order."""
    errors = sorted(_validator().iter_errors(document), key=lambda error: list(map(str, error.absolute_path)))
    return [Problem(file, field_path(error.absolute_path), error.message) for error in errors]
