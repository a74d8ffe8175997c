"""Streamed requests to llama-server: the gateway's hot path, kept lean.

A relayed token costs the gateway one wake-up, one read from llama-server and one write to the
client; on a 2-core machine whatever the gateway spends beyond that is taken from llama-server's
own threads. httpx (h11 in Python, anyio cancel scopes, a connection pool) cost about four times
a byte-for-byte proxy per token, so streams use this small client instead: one connection per
stream over the child's Unix socket, parsed by httptools (llhttp, in C: the parser uvicorn itself
uses), body pieces handed over as they arrive, reading paused while the consumer lags. Short
calls (health, warm-up, whole responses, embeddings) keep httpx, where its comfort costs nothing;
either way a child that does not answer is a 503 that says so, never a crash.

Closing the stream closes the connection, which is how llama-server learns that a client has gone
and frees its slot.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httptools
import httpx

from runtimes.gateway.errors import ApiError
from runtimes.gateway.metrics import parse_prometheus, slot_figures
from runtimes.gateway.sse import dumps

HIGH_WATER = 256 * 1024  # bytes queued before reading from llama-server pauses
CONNECT_TIMEOUT_S = 10.0


class UpstreamError(ConnectionError):
    """llama-server closed or garbled a stream (the gateway turns it into a 503)."""


class _Protocol(asyncio.Protocol):
    """Feeds llama-server's bytes to httptools; keeps the body pieces for :class:`Stream`."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[int] = loop.create_future()
        self.pieces: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.finished = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"llama-server sent a malformed response: {exc}"))
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished:
            self._fail(UpstreamError(f"llama-server closed the stream early ({exc or 'EOF'})"))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        if not self.head.done():
            self.head.set_result(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)
        self.queued += len(body)
        if self.queued > HIGH_WATER and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.finished = True
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        if not self.head.done():
            self.head.set_exception(error)
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class Stream:
    """One streamed response of llama-server: its status, then its body as it arrives."""

    def __init__(self, protocol: _Protocol, status: int) -> None:
        self._protocol = protocol
        self.status_code = status

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body (de-chunked) in arrival order; all that is queued comes as one piece."""
        protocol = self._protocol
        while True:
            if protocol.pieces:
                data = b"".join(protocol.pieces)
                protocol.pieces.clear()
                protocol.queued = 0
                if protocol.paused and protocol.transport is not None:
                    protocol.paused = False
                    protocol.transport.resume_reading()
                yield data
                continue
            if protocol.finished:
                return
            if protocol.error is not None:
                raise protocol.error
            protocol.waiter = asyncio.get_running_loop().create_future()
            await protocol.waiter
            protocol.waiter = None

    async def aread(self) -> bytes:
        """The whole body (for an error answer)."""
        return b"".join([piece async for piece in self.pieces()])

    async def aclose(self) -> None:
        """Close the connection: llama-server stops the request when it notices."""
        if self._protocol.transport is not None:
            self._protocol.transport.close()


async def open_stream(socket_path: str, path: str, body: bytes) -> Stream:
    """POST ``body`` (JSON) to ``path`` and return once llama-server has sent its head.

    Raises :class:`UpstreamError` (or an ``OSError``) when llama-server cannot be reached.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await asyncio.wait_for(
        loop.create_unix_connection(_Protocol, socket_path), CONNECT_TIMEOUT_S
    )
    protocol.transport = cast(asyncio.Transport, transport)  # uvloop: connection_made comes later
    request = (
        f"POST {path} HTTP/1.1\r\nHost: llama-server\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    transport.write(request + body)
    try:
        status = await protocol.head
    except BaseException:
        transport.close()
        raise
    return Stream(protocol, status)


def not_answering(exc: BaseException) -> ApiError:
    """The 503 for a child that does not answer (it is being restarted)."""
    return ApiError(
        503,
        f"llama-server is not answering ({exc.__class__.__name__}); it is being restarted, "
        "check GET /health",
        type="service_unavailable",
        code="model_not_ready",
    )


async def stream_request(socket: str, path: str, body: dict[str, Any]) -> Stream:
    """Open a streamed request; a child that is not answering is a 503, not a crash."""
    try:
        return await open_stream(socket, path, dumps(body))
    except (OSError, TimeoutError) as exc:
        raise not_answering(exc) from exc


async def post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST to llama-server; a child that is not answering is a 503, not a crash."""
    try:
        return await client.post(path, json=body)
    except httpx.HTTPError as exc:
        raise not_answering(exc) from exc


async def cancellable(
    call: Awaitable[httpx.Response], client_gone: Callable[[], Awaitable[bool]]
) -> httpx.Response | None:
    """Await ``call``; cancel it (closing the upstream connection, which stops llama-server's
    task) when the client hangs up first (``client_gone``). None when it did."""
    task = asyncio.ensure_future(call)
    while True:
        finished, _ = await asyncio.wait({task}, timeout=0.1)
        if finished:
            result: httpx.Response = task.result()
            return result
        if await client_gone():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return None


async def live_figures(client: httpx.AsyncClient) -> dict[str, float]:
    """llama-server's own gauges, from its ``/metrics`` and ``/slots``; what cannot be read now
    is left out (a scrape must not fail because the child is busy or restarting)."""
    figures: dict[str, float] = {}
    with contextlib.suppress(httpx.HTTPError, ValueError):
        upstream = parse_prometheus((await client.get("/metrics", timeout=2)).text)
        figures["queue_depth"] = upstream.get("requests_deferred", 0.0)
        figures["llama_prompt_tokens_per_second"] = upstream.get("prompt_tokens_seconds", 0.0)
        figures["llama_predicted_tokens_per_second"] = upstream.get("predicted_tokens_seconds", 0.0)
    with contextlib.suppress(httpx.HTTPError, ValueError):
        slots = (await client.get("/slots", timeout=2)).json()
        if isinstance(slots, list):
            figures.update(slot_figures(slots))
    return figures


async def native_tools(client: httpx.AsyncClient) -> bool:
    """Whether llama-server's chat template renders tools and tool calls itself."""
    try:
        caps = (await client.get("/props", timeout=10)).json().get("chat_template_caps") or {}
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return bool(caps.get("supports_tools") and caps.get("supports_tool_calls"))


async def vocabulary(client: httpx.AsyncClient) -> int | None:
    """How many token ids the model has (llama-server's ``/v1/models`` says it); None if it
    does not say, and then token inputs are refused rather than passed on unchecked."""
    try:
        models = (await client.get("/v1/models", timeout=10)).json().get("data") or []
        return int(models[0]["meta"]["n_vocab"])
    except (httpx.HTTPError, ValueError, AttributeError, LookupError, TypeError):
        return None


async def newline_tokens(client: httpx.AsyncClient) -> tuple[int, ...]:
    """The ids of the tokens that are whitespace with a line break in it, which llama.cpp's JSON
    grammar lets a model put between JSON tokens (a break or two, then up to 20 spaces or
    tabs). A constrained tool reply never needs them (a line break inside a JSON string is
    written as an escape), and a small model pretty-printing its JSON spends its ``max_tokens``
    on them."""
    found: set[int] = set()
    for breaks in ("\n", "\n\n"):
        for indent in (" ", "\t"):
            for width in range(21):
                text = breaks + indent * width
                try:
                    response = await client.post(
                        "/tokenize", json={"content": text, "add_special": False}, timeout=10
                    )
                    tokens = response.json().get("tokens") or []
                except (httpx.HTTPError, ValueError, AttributeError):
                    return ()
                if len(tokens) == 1 and isinstance(tokens[0], int):
                    found.add(tokens[0])
    return tuple(sorted(found))


async def warm_chat(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/completions", json={"prompt": "Hello", "max_tokens": 1, "seed": 0}, timeout=300
    )
    if response.status_code != 200:
        raise RuntimeError(f"warm-up answered {response.status_code}: {response.text[:300]}")


async def warm_embeddings(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"input": "Hello"}, timeout=300)
    if response.status_code != 200:
        raise RuntimeError(f"warm-up answered {response.status_code}: {response.text[:300]}")
