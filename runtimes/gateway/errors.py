"""The API's error in OpenAI's shape, shared by the gateway and its engines."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from runtimes.gateway import answers as a


class ApiError(Exception):
    """An error returned to the client in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def response(self) -> JSONResponse:
        """The JSON response."""
        return JSONResponse(self.body(), status_code=self.status)

    def body(self) -> dict[str, Any]:
        """The error object."""
        error = a.ErrorBody(message=self.message, type=self.type, param=self.param, code=self.code)
        return {"error": error.model_dump()}


def error_json(status: int, message: str, **kwargs: Any) -> bytes:
    """An error body as bytes (for raw ASGI responses)."""
    return json.dumps(ApiError(status, message, **kwargs).body()).encode()


def unsupported(engine: str, field: str, what: str | None = None) -> ApiError:
    """What an engine cannot do: a 400 naming the field."""
    return ApiError(
        400,
        f"the {engine} engine does not support {what or field}; leave {field!r} out of the request",
        param=field,
        code="unsupported_parameter",
    )
