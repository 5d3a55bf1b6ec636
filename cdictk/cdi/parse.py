"""Spec file bytes -> plain data, strictly.

JSON goes through the standard library's parser (:mod:`cdictk.startpath.helpers.strictjson`), anything else
through cdictk's strict YAML reader (:mod:`cdictk.strictyaml`: no duplicate keys, anchors, tags or deep
nesting; plain scalars typed as the Go library types them). ``cdictk cdi validate`` warns about YAML
after the first document, which no reader of specs sees.
"""

from __future__ import annotations

from typing import Any

from cdictk.startpath.helpers import strictjson
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.strictyaml import parse_yaml


def parse_document(data: bytes, file: str, *, json_only: bool = False) -> Any:
    """Parse a spec document. A document that looks like JSON is read as JSON first. The Go library
    reads every spec as YAML, of which JSON is a subset, so by default YAML that is not JSON (flow
    style, a trailing comma) still loads, as it does for runtimes; ``json_only`` refuses it."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CdictkError(file, "", f"not valid UTF-8 (byte {exc.start})") from exc
    if not json_only and not text.lstrip().startswith("{"):
        return parse_yaml(text, file)
    try:
        return strictjson.loads(text, file)
    except CdictkError as json_error:
        try:
            document = parse_yaml(text, file)
        except CdictkError as yaml_error:
            # The YAML reader knows the field path of a duplicate key; JSON's syntax messages are clearer.
            raise (yaml_error if yaml_error.problem.field else json_error) from None
        if json_only:
            raise
        return document
