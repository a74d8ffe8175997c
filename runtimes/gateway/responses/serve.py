"""``POST /v1/responses`` end to end: the request translated into a chat request
(:mod:`runtimes.gateway.responses.translate`), answered by the engine as a chat stream, read back
as Responses events (:mod:`runtimes.gateway.responses.events`), streamed or answered whole, and
kept for ``previous_response_id`` (:mod:`runtimes.gateway.responses.store`).

The engine is always asked for a stream, with usage: a streamed response needs its pieces as
they come, and a whole one is the same events gathered, so both take one path.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from runtimes.gateway.errors import ApiError
from runtimes.gateway.responses.events import Event, ResponseBuilder
from runtimes.gateway.responses.request import ResponseRequest
from runtimes.gateway.responses.store import ResponseStore
from runtimes.gateway.responses.translate import chat_request, responses_param
from runtimes.gateway.sse import SseEvents, dumps, loads, streaming

ChatCall = Callable[[dict[str, Any]], Awaitable[Response]]  # chat JSON -> the engine's answer


async def respond(
    body: ResponseRequest, model_id: str, store: ResponseStore, chat: ChatCall
) -> Response:
    """Answer one Responses request through ``chat`` (the gateway's checked chat call)."""
    previous = body.previous_response_id
    history = store.previous(previous).messages if previous else []
    request, origins = chat_request(body, history)
    try:
        answer = await chat(request)
    except ApiError as exc:
        raise _named(exc, origins) from None
    if not isinstance(answer, StreamingResponse):
        return answer  # the client hung up while the request waited (204)
    builder = ResponseBuilder(body, model_id)
    # the instructions come first, and a later request does not inherit them (as at OpenAI)
    conversation = request["messages"][1:] if body.instructions else request["messages"]
    events = _events(builder, answer, conversation, store if body.store else None)
    if body.stream:
        return streaming(_sse(events))
    async for _ in events:
        if builder.error is not None:
            raise _error(builder.error)
    return JSONResponse(builder.response(_status(builder)))


async def _events(
    builder: ResponseBuilder,
    answer: StreamingResponse,
    conversation: list[dict[str, Any]],
    store: ResponseStore | None,
) -> AsyncIterator[Event]:
    """The response's events from the engine's chat stream; the response is stored once it
    completed."""
    for event in builder.start():
        yield event
    async for chunk in _chunks(answer):
        if "error" in chunk:
            for event in builder.failed(chunk["error"]):
                yield event
            return
        for event in builder.chunk(chunk):
            yield event
    for event in builder.end():
        yield event
    if store is not None:
        store.put([*conversation, builder.reply()], builder.response(_status(builder)))


async def _chunks(answer: StreamingResponse) -> AsyncIterator[dict[str, Any]]:
    """The chat chunks of an engine's event stream (comments and [DONE] left out); the
    engine's stream is closed when this ends, early or not."""
    iterator = answer.body_iterator
    reader = SseEvents()
    try:
        async for piece in iterator:
            data = piece if isinstance(piece, bytes) else str(piece).encode()
            for payload in reader.feed(bytes(data)):
                if payload == b"[DONE]":
                    return
                chunk = loads(payload)
                if isinstance(chunk, dict):
                    yield chunk
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


async def _sse(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """OpenAI's Responses stream: each event named by an ``event:`` line, no [DONE]."""
    async for event in events:
        yield b"event: " + event["type"].encode() + b"\ndata: " + dumps(event) + b"\n\n"


def _status(builder: ResponseBuilder) -> str:
    return "incomplete" if builder.finish == "length" else "completed"


def _named(error: ApiError, origins: list[str]) -> ApiError:
    """An error about the chat request, naming the Responses field it came from."""
    param = responses_param(error.param, origins)
    if error.param and param != error.param:
        error.message = error.message.replace(error.param, param or "input")
        error.param = param
    return error


STATUS = {"invalid_request_error": 400, "service_unavailable": 503}


def _error(error: dict[str, Any]) -> ApiError:
    """The engine's error as the whole answer's status (it came in its stream)."""
    kind = str(error.get("type") or "server_error")
    return ApiError(STATUS.get(kind, 500), str(error.get("message") or "generation failed"),
                    type=kind, param=error.get("param"), code=error.get("code"))  # fmt: skip
