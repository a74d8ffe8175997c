"""Invalid request bodies as OpenAI answers them: a 400 ``invalid_request_error`` whose
``param`` names the field the way OpenAI writes it (``messages[0].content``).

OpenAI's clients catch ``BadRequestError`` (400); FastAPI's own answer to a body that fails its
model is a 422, which those clients raise as ``UnprocessableEntityError`` and most callers never
catch. So every validation failure is turned into OpenAI's status, type, param and code here,
and the served OpenAPI document says 400 (:mod:`runtimes.gateway.openapi`), not FastAPI's 422.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtimes.gateway.errors import ApiError

NOT_AN_OBJECT = ("model_attributes_type", "dict_type", "missing")
# pydantic's own steps in an error's location: a union member's tag, a dict key's check
PYDANTIC_TAGS = frozenset({"str", "int", "float", "bool", "none", "[key]"})
# OpenAI's codes for the kinds of failure pydantic reports
CODES = {"missing": "missing_required_parameter"}
TYPE_ERRORS = ("_type", "_parsing")


def validation_error(errors: Sequence[Any]) -> ApiError:
    """The 400 for a body that failed validation: not JSON, not an object, or a bad field."""
    if any(e.get("type") in NOT_AN_OBJECT and tuple(e.get("loc", ())) == ("body",) for e in errors):
        return ApiError(400, "the request body must be a JSON object", code="invalid_json")
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid")
        ctx = detail.get("ctx") or {}
        return ApiError(
            400,
            f"the request body is not valid JSON: {ctx.get('error', detail.get('msg'))}",
            code="invalid_json",
        )
    # the deepest failure names the field: a list sent where a text or a list is allowed
    # failed as a text too, at the list's own name
    first: Mapping[str, Any] = max(errors, key=lambda e: len(e.get("loc", ())), default={})
    messages = "; ".join(f"{field_name(e) or 'body'}: {e.get('msg')}" for e in errors[:5])
    return ApiError(
        400, f"invalid request: {messages}", param=field_name(first) or None, code=_code(first)
    )


def _code(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type", ""))
    if kind in CODES:
        return CODES[kind]
    return "invalid_type" if kind.endswith(TYPE_ERRORS) else "invalid_value"


def field_name(error: Mapping[str, Any]) -> str:
    """The request field an error is about, as OpenAI names it (``messages[0].content``),
    without pydantic's own steps: ``body``, a union member's tag (``str``, ``list[...]``,
    ``TextPart``) or ``[key]`` (a dict key that failed is named by the key itself)."""
    name = ""
    for part in error.get("loc", ()):
        if isinstance(part, int):
            name += f"[{part}]"
            continue
        text = str(part)
        internal = text in PYDANTIC_TAGS or "[" in text or text[:1].isupper()
        if text != "body" and not internal:
            name += f".{text}" if name else text
    return name
