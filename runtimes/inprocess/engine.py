"""Engines that run inside the gateway's process (OpenVINO GenAI, ONNX Runtime, and the
llama.cpp binding where it is used as a library): a :class:`RuntimeAdapter` behind the
:class:`~runtimes.inprocess.scheduler.EngineQueue`.

The gateway gives these the same surface as llama-server: the same request validation, the
same response and stream shapes, the same errors. What such an adapter cannot do (tools,
``response_format``, logprobs, several choices) is a 400 that names the field.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import struct
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from fastapi import Request, Response

from runtimes.gateway import schemas as s
from runtimes.gateway.budget import context_exceeded
from runtimes.gateway.errors import ApiError, unsupported
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.sse import DONE, HEAD_GRACE_S, KEEPALIVE_S, TokenClock, event, streaming
from runtimes.inprocess.adapter import (
    Delta,
    Message,
    RuntimeAdapter,
    SamplingParams,
    UnsupportedError,
    Usage,
)
from runtimes.inprocess.scheduler import EngineQueue

log = logging.getLogger("snapbuild.runtimes.local")

MAX_EMBEDDING_INPUTS = 2048


class LocalEngine:
    """An in-process adapter, one generation at a time."""

    def __init__(
        self, adapter: RuntimeAdapter, *, context_size: int, metrics: Metrics, loaded: bool = False
    ) -> None:
        self.adapter = adapter
        self.loaded = loaded  # True: the caller loaded the adapter; start only warms it up
        self.context_size = context_size
        self.metrics = metrics
        self.queue: EngineQueue | None = None
        self.notes = adapter.notes
        self.inputs: tuple[str, ...] = tuple(getattr(adapter, "inputs", ("text",)))
        gauges = getattr(adapter, "metrics", None)
        if callable(gauges):  # adapters that batch report their own figures
            metrics.sources.append(gauges)

    @property
    def capabilities(self) -> frozenset[str]:
        """The adapter's, read each time: loading can take chat away (no usable template)."""
        return self.adapter.capabilities

    @property
    def runtime(self) -> str:
        """The runtime id."""
        return self.adapter.options.runtime

    async def start(self) -> None:
        """Load (when not loaded yet) and warm up in the engine's worker."""
        self.queue = EngineQueue(slots=self.adapter.concurrency)

        def load_and_warm() -> None:
            if not self.loaded:
                self.adapter.load()
                self.loaded = True
            self.adapter.warm_up()

        await self.queue.call(load_and_warm)

    async def stop(self) -> None:
        """Stop the worker."""
        if self.queue is not None:
            self.queue.shutdown()

    def describe(self) -> dict[str, Any]:
        """The adapter's description."""
        return self.adapter.describe()

    def stats(self) -> dict[str, int]:
        """The queue's counters."""
        if self.queue is None:
            return {"active": 0, "queued": 0, "completed": 0, "cancelled": 0, "failed": 0}
        return self.queue.stats()

    async def refresh_live(self) -> dict[str, float]:
        """Queue figures plus the adapter's own gauges."""
        stats = self.stats()
        return {
            "queue_depth": float(stats["queued"]),
            "slots_busy": float(stats["active"]),
            "slots_total": float(self.queue.slots if self.queue else 1),
            **self.metrics.live(),
        }

    # requests ------------------------------------------------------------------------------
    async def chat(self, payload: dict[str, Any], request: Request) -> Response:
        body = s.ChatCompletionRequest.model_validate(payload)
        self._refuse_unsupported(body)
        messages = [Message(m.role, m.text(), m.image_bytes()) for m in body.messages]
        params = _params(body, body.max_completion_tokens or body.max_tokens)
        adapter = self.adapter

        def start(cancel: threading.Event) -> Iterator[Delta]:
            self._check_context(adapter.count_chat_tokens(messages), params, "messages")
            return adapter.chat(messages, params, cancel)

        return await self._generate(request, start, body, chat=True)

    async def completions(self, payload: dict[str, Any], request: Request) -> Response:
        body = s.CompletionRequest.model_validate(payload)
        self._refuse_unsupported(body)
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise ApiError(400, "give exactly one prompt per request", param="prompt")
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        params = _params(body, body.max_tokens)
        adapter = self.adapter

        def start(cancel: threading.Event) -> Iterator[Delta]:
            self._check_context(adapter.count_tokens(prompt), params, "prompt")
            return adapter.complete(prompt, params, cancel)

        return await self._generate(request, start, body, chat=False)

    async def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = s.EmbeddingRequest.model_validate(payload)
        texts = [body.input] if isinstance(body.input, str) else body.input
        assert self.queue is not None
        result = await self.queue.call(lambda: self.adapter.embed(texts))
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
                for i, v in enumerate(result.vectors)
            ],
            "model": payload["model"],
            "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        }

    def _refuse_unsupported(self, body: s.ChatCompletionRequest | s.CompletionRequest) -> None:
        engine = self.runtime
        if body.n != 1:
            raise unsupported(engine, "n", "more than one choice per request")
        if body.logit_bias:
            raise unsupported(engine, "logit_bias")
        if isinstance(body, s.ChatCompletionRequest):
            if body.tools:
                raise unsupported(engine, "tools", "tool calls")
            if body.tool_choice not in (None, "none", "auto"):
                raise unsupported(engine, "tool_choice", "tool calls")
            if body.response_format is not None and body.response_format.type != "text":
                raise unsupported(engine, "response_format", "constrained JSON output")
            if body.logprobs or body.top_logprobs:
                raise unsupported(engine, "logprobs")
        elif body.logprobs is not None or body.echo:
            raise unsupported(engine, "logprobs" if body.logprobs is not None else "echo")

    def _check_context(self, prompt_tokens: int, params: SamplingParams, param: str) -> None:
        limit = self.context_size
        wanted = prompt_tokens + (params.max_tokens or 0)
        if prompt_tokens >= limit or wanted > limit:
            raise context_exceeded(limit, prompt_tokens, params.max_tokens, param)

    async def _generate(
        self,
        request: Request,
        start: Callable[[threading.Event], Iterator[Delta]],
        body: s.ChatCompletionRequest | s.CompletionRequest,
        *,
        chat: bool,
    ) -> Response:
        """Queue the generation. JSON answers wait for the end; streams answer their headers
        within :data:`HEAD_GRACE_S` (so an error found at once is still a proper status) and
        send SSE comments while queued."""
        assert self.queue is not None
        cancel = threading.Event()
        watcher = asyncio.create_task(_watch_disconnect(request, cancel))
        deltas = self.queue.stream(start, cancel)
        started = time.monotonic()
        first = asyncio.ensure_future(deltas.__anext__())
        grace = None if not body.stream else HEAD_GRACE_S
        finished, _ = await asyncio.wait({first}, timeout=grace)
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        model = body.model
        if finished:
            try:
                first.result()
            except StopAsyncIteration:  # cancelled while queued: the client is gone
                watcher.cancel()
                return Response(status_code=204)
            except BaseException:
                watcher.cancel()
                await deltas.aclose()
                raise
        if not body.stream:
            try:
                pieces = [first.result()]
                async for delta in deltas:
                    pieces.append(delta)
            finally:
                watcher.cancel()
                await deltas.aclose()
            self.metrics.observe("time_to_first_token_seconds", time.monotonic() - started)
            whole = _whole(model, ident, created, pieces, chat)
            self.metrics.add_tokens(whole["usage"]["completion_tokens"])
            return Response(json.dumps(whole), media_type="application/json")
        watcher.cancel()  # from here Starlette notices disconnects and closes the stream
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        stream = _Stream(self.metrics, model, ident, created, chat, include_usage, started)
        return streaming(stream.events(first, deltas))


def _params(
    body: s.ChatCompletionRequest | s.CompletionRequest, max_tokens: int | None
) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stops(),
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        ignore_eos=body.ignore_eos,
    )


async def _watch_disconnect(request: Request, cancel: threading.Event) -> None:
    while not cancel.is_set():
        if await request.is_disconnected():
            cancel.set()
            return
        await asyncio.sleep(0.1)


def _finish(last: Delta) -> tuple[str, Usage]:
    usage = last.usage or Usage(prompt_tokens=0)
    reason = last.finish_reason if last.finish_reason in ("stop", "length") else "stop"
    return reason, usage


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _whole(
    model: str, ident: str, created: int, pieces: Sequence[Delta], chat: bool
) -> dict[str, Any]:
    text = "".join(p.text for p in pieces)
    reason, usage = _finish(pieces[-1])
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": None,
            "finish_reason": reason,
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        kind = "text_completion"
    return {
        "id": ident,
        "object": kind,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": _usage(usage),
    }


class _Stream:
    """The SSE body of an in-process generation, in the shapes llama-server's relay sends."""

    def __init__(
        self,
        metrics: Metrics,
        model: str,
        ident: str,
        created: int,
        chat: bool,
        include_usage: bool,
        started: float,
    ) -> None:
        self.metrics = metrics
        self.model = model
        self.ident = ident
        self.created = created
        self.chat = chat
        self.include_usage = include_usage
        self.clock = TokenClock(metrics, started)

    def chunk(self, choices: list[dict[str, Any]], usage: Usage | None = None) -> bytes:
        data: dict[str, Any] = {
            "id": self.ident,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            data["usage"] = _usage(usage)
        return event(data)

    def piece(self, text: str | None, reason: str | None = None, *, role: bool = False) -> bytes:
        if self.chat:
            delta: dict[str, Any] = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            return self.chunk(
                [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]
            )
        return self.chunk(
            [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}]
        )

    def timed(self, text: str) -> bytes:
        self.clock.tick()
        return self.piece(text)

    async def events(
        self, first: asyncio.Future[Delta], deltas: AsyncGenerator[Delta, None]
    ) -> AsyncIterator[bytes]:
        """Role chunk (chat), one chunk per delta, a finish chunk, the usage-only chunk when
        asked for (``stream_options.include_usage``), [DONE]; comments while queued."""
        try:
            yield b": connected\n\n"
            while not first.done():
                await asyncio.wait({first}, timeout=KEEPALIVE_S)
                if not first.done():
                    yield b": waiting for the engine\n\n"
            try:
                last = first.result()
            except StopAsyncIteration:
                return
            if self.chat:
                yield self.piece(None, role=True)
            if last.text:
                yield self.timed(last.text)
            async for current in deltas:  # drained to the end: the worker counts it completed
                last = current
                if current.text:
                    yield self.timed(current.text)
            reason, usage = _finish(last)
            self.metrics.add_tokens(usage.completion_tokens)
            yield self.piece(None if self.chat else "", reason)
            if self.include_usage:
                yield self.chunk([], usage)
        except ApiError as exc:
            yield event(exc.body())
        except UnsupportedError as exc:
            yield event(ApiError(400, exc.brief).body())
        except Exception as exc:  # the stream has started: report in-band, keep the server up
            log.exception("generation failed mid-stream")
            yield event(ApiError(500, f"generation failed: {exc}", type="server_error").body())
        finally:
            if not first.done():
                first.cancel()
            with contextlib.suppress(Exception):
                await deltas.aclose()
        yield DONE


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    """OpenAI's encodings: a JSON list, or base64 of little-endian float32 (the openai
    client's default, as it is four times smaller)."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector
