"""The served OpenAPI document, made to say what the API does: FastAPI derives it from the
pydantic models, but answers invalid bodies with a 400 (:mod:`runtimes.gateway.validation`)
where FastAPI would document its own 422, and describes event streams whose chunk models no
route returns as JSON, so FastAPI would leave their references dangling."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, TypeAdapter

REF = "#/components/schemas/{model}"


def describe(app: FastAPI, stream_models: Sequence[type[BaseModel]]) -> None:
    """Serve a document without FastAPI's 422s and with ``stream_models`` (the chunks of the
    ``text/event-stream`` answers) among its schemas."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for model in stream_models:
            schema = TypeAdapter(model).json_schema(ref_template=REF)
            schemas.update(schema.pop("$defs", {}))
            schemas.setdefault(model.__name__, schema)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
