"""OpenAI's published response schemas, for checking that every response and stream chunk has
the shape OpenAI's clients expect.

``tests/data/openai/schemas.json`` holds the component schemas of OpenAI's OpenAPI document
(github.com/openai/openai-openapi, ``openapi.json``; MIT, see ``NOTICE``) that our responses
must satisfy, with everything they reference. Regenerate with
``python tests/support/openai_schema.py PATH/TO/openapi.json COMMIT``.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

DATA = Path(__file__).resolve().parent.parent / "data" / "openai" / "schemas.json"
ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "CreateEmbeddingResponse",
    "ListModelsResponse",
    "Model",
    "ErrorResponse",
    "Response",  # the Responses API: its object and every stream event
    "ResponseStreamEvent",
)


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def extract(spec: dict[str, Any], source: str) -> dict[str, Any]:
    """The ROOTS and every schema they reference, as one document."""
    schemas = spec["components"]["schemas"]
    keep: dict[str, Any] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = schemas[name]
        todo.extend(_refs(schemas[name]) - keep.keys())
    return {"source": source, "components": {"schemas": dict(sorted(keep.items()))}}


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` in JSON Schema terms (null is allowed too)."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items() if k != "nullable"}
    if not node.get("nullable"):
        return out
    if isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [out, {"type": "null"}]}


@cache
def _document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    converted: dict[str, Any] = _nullable(loaded)
    return converted


def validate(name: str, instance: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``instance`` fits OpenAI's ``name``."""
    doc = _document()
    schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    jsonschema.validate(instance, schema, cls=jsonschema.Draft202012Validator)


@cache
def _event_schemas() -> dict[str, str]:
    """Each Responses stream event's type -> the name of its own schema."""
    schemas = _document()["components"]["schemas"]
    found = {}
    for option in schemas["ResponseStreamEvent"]["anyOf"]:
        name = option["$ref"].rsplit("/", 1)[1]
        kind = schemas[name].get("properties", {}).get("type", {}).get("enum", [None])[0]
        if kind is not None:
            found[kind] = name
    return found


def validate_event(event: dict[str, Any]) -> None:
    """Check one Responses stream event against the schema of its ``type`` (validating against
    the whole union would only say that no member fits)."""
    validate(_event_schemas()[event["type"]], event)


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    out = extract(spec, f"openai/openai-openapi openapi.json at {sys.argv[2]}")
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
