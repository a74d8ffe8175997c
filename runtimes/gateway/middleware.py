"""The gateway's pure ASGI middleware: the body limit and the request counter.

Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``, because both must see the raw
messages: :class:`BodyLimit` counts the bytes actually received (a lying or missing
Content-Length does not get past it) and :class:`CountRequests` reads the status of streamed
answers, which a response-object middleware would buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from runtimes.gateway.errors import error_json
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.protocol import LIMITS
from runtimes.gateway.unicode import lone_surrogate

__all__ = ["ASGIApp", "BodyLimit", "CountRequests"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """Pure ASGI middleware: read the whole request body, refuse it with 413 past ``limit``.

    It counts received bytes (chunked uploads and false Content-Length headers included), then
    replays the body to the app, whose later ``receive`` calls go to the server as usual (that
    is how disconnects are noticed).
    """

    def __init__(self, app: ASGIApp, limit: int, seconds: float = LIMITS.body_s) -> None:
        self.app = app
        self.limit = limit
        self.seconds = seconds  # for the whole body: a trickle of bytes holds nothing for long

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send, int(declared))
            return
        chunks: list[bytes] = []
        size = 0
        deadline = asyncio.get_running_loop().time() + self.seconds
        while True:
            try:
                message = await _before(deadline, receive())
            except asyncio.TimeoutError:
                await _answer(send, 408, _too_slow(self.seconds))
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self._refuse(send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        field = lone_surrogate(body)
        if field is not None:
            await _answer(send, 400, _surrogate_error(field))
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, size: int) -> None:
        payload = error_json(
            413,
            f"request body too large: more than {self.limit} bytes (got at least {size}); "
            "send smaller requests",
            code="request_too_large",
        )
        await _answer(send, 413, payload)


async def _before(deadline: float, waiting: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    left = deadline - asyncio.get_running_loop().time()
    return await asyncio.wait_for(waiting, max(left, 0.0))


def _too_slow(seconds: float) -> bytes:
    return error_json(
        408,
        f"the request body did not arrive within {seconds:g} s; send it in one go",
        code="request_timeout",
    )


def _surrogate_error(field: str) -> bytes:
    return error_json(
        400,
        f"the request body is not valid JSON text: {field or 'it'} holds a lone UTF-16 "
        "surrogate (a \\uD800-\\uDFFF escape without its pair); send valid Unicode",
        param=field or None,
        code="invalid_json",
    )


async def _answer(send: Send, status: int, payload: bytes) -> None:
    """A whole JSON error answer, the connection closed after it."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class CountRequests:
    """Pure ASGI middleware: count answered API requests by endpoint and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        endpoint = _endpoint_label(path)

        async def counting(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.metrics.count_request(endpoint, int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting)


KNOWN_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models")


def _endpoint_label(path: str) -> str:
    """A bounded label for a request path (clients choose paths; metrics must not grow)."""
    if path in KNOWN_ENDPOINTS:
        return path
    return "/v1/models/{model}" if path.startswith("/v1/models/") else "other"
