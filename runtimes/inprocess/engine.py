"""Engines that run inside the gateway's process (OpenVINO GenAI, ONNX Runtime, and the
llama.cpp binding where the catalog says ``serving: in-process``): a :class:`RuntimeAdapter`
behind the :class:`~runtimes.inprocess.scheduler.EngineQueue`, answering the gateway's
:class:`~runtimes.engine.Engine` protocol (the answers' shapes: :mod:`runtimes.inprocess.shapes`).

The gateway gives these the same surface as llama-server: the same request validation, the
same response and stream shapes, the same errors. What such an adapter cannot do (tools,
``response_format``, logprobs, several choices) is a 400 that names the field.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from fastapi import Response

from runtimes import requests as s
from runtimes.engine import Call, JsonObject, Modality, Status
from runtimes.gateway.budget import context_exceeded
from runtimes.gateway.errors import unsupported
from runtimes.gateway.inputs import items
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.sse import HEAD_GRACE_S, streaming
from runtimes.inprocess.adapter import Delta, Message, RuntimeAdapter, SamplingParams
from runtimes.inprocess.scheduler import EngineQueue
from runtimes.inprocess.shapes import Stream, whole


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
        metrics.sources.append(adapter.metrics)  # adapters that batch report their own figures

    @property
    def capabilities(self) -> frozenset[str]:
        """The adapter's, read each time: loading can take chat away (no usable template)."""
        return self.adapter.capabilities

    @property
    def runtime(self) -> str:
        """The runtime id."""
        return self.adapter.options.runtime

    @property
    def inputs(self) -> tuple[Modality, ...]:
        """The adapter's (a vision pipeline takes images)."""
        return self.adapter.inputs

    @property
    def max_choices(self) -> int | None:
        """None: adapters generate one choice, and :meth:`_refuse_unsupported` says so."""
        return None

    @property
    def vocabulary(self) -> int | None:
        """None: adapters take text (their tokenizers are their own), so the gateway refuses
        token ids with a 400 naming the field."""
        return None

    def status(self) -> tuple[Status, str | None]:
        """Ok once started: nothing runs outside this process that could stop answering."""
        return ("ok", None) if self.queue is not None else ("loading", None)

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
    async def chat(self, body: s.ChatCompletionRequest, call: Call) -> Response:
        """Queue a chat generation (images: the bytes the gateway checked)."""
        self._refuse_unsupported(body)
        messages = [Message(m.role, m.text(), m.image_bytes()) for m in body.messages]
        params = _params(body, body.max_completion_tokens or body.max_tokens)
        adapter = self.adapter

        def start(cancel: threading.Event) -> Iterator[Delta]:
            self._check_context(adapter.count_chat_tokens(messages), params, "messages")
            return adapter.chat(messages, params, cancel)

        return await self._generate(call.client_gone, start, body, chat=True)

    async def completions(self, body: s.CompletionRequest, call: Call) -> Response:
        """Queue a completion of one text prompt (the gateway refused token ids)."""
        self._refuse_unsupported(body)
        prompt = items(body.prompt)[0]
        assert isinstance(prompt, str)
        params = _params(body, body.max_tokens)
        adapter = self.adapter

        def start(cancel: threading.Event) -> Iterator[Delta]:
            self._check_context(adapter.count_tokens(prompt), params, "prompt")
            return adapter.complete(prompt, params, cancel)

        return await self._generate(call.client_gone, start, body, chat=False)

    async def embeddings(self, body: s.EmbeddingRequest, call: Call) -> JsonObject:
        """Embed in the engine's worker (batching adapters gather concurrent requests)."""
        texts = [text for text in items(body.input) if isinstance(text, str)]  # ids: refused
        assert self.queue is not None
        if self.adapter.gathers:
            result = await self.queue.wait(lambda: self.adapter.embed_later(texts))
        else:
            result = await self.queue.call(lambda: self.adapter.embed(texts))
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
                for i, v in enumerate(result.vectors)
            ],
            "model": body.model,
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
        else:
            _refuse_legacy(engine, body)

    def _check_context(self, prompt_tokens: int, params: SamplingParams, param: str) -> None:
        limit = self.context_size
        wanted = prompt_tokens + (params.max_tokens or 0)
        if prompt_tokens >= limit or wanted > limit:
            raise context_exceeded(limit, prompt_tokens, params.max_tokens, param)

    async def _generate(
        self,
        client_gone: Callable[[], Awaitable[bool]],
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
        watcher = asyncio.create_task(_watch_disconnect(client_gone, cancel))
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
            answer = whole(model, ident, created, pieces, chat)
            self.metrics.add_tokens(answer["usage"]["completion_tokens"])
            return Response(json.dumps(answer), media_type="application/json")
        watcher.cancel()  # from here Starlette notices disconnects and closes the stream
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        stream = Stream(self.metrics, model, ident, created, chat, include_usage, started)
        return streaming(stream.events(first, deltas))


def _refuse_legacy(engine: str, body: s.CompletionRequest) -> None:
    """What an adapter cannot do of the legacy completions endpoint: one text prompt, one
    choice, text out (llama-server engines do all of it)."""
    if len(items(body.prompt)) > 1:
        raise unsupported(engine, "prompt", "more than one prompt per request")
    if body.logprobs is not None:
        raise unsupported(engine, "logprobs")
    if body.echo:
        raise unsupported(engine, "echo")
    if body.max_tokens == 0:
        raise unsupported(engine, "max_tokens", "max_tokens 0 (scoring a prompt)")


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


async def _watch_disconnect(
    client_gone: Callable[[], Awaitable[bool]], cancel: threading.Event
) -> None:
    while not cancel.is_set():
        if await client_gone():
            cancel.set()
            return
        await asyncio.sleep(0.1)


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    """OpenAI's encodings: a JSON list, or base64 of little-endian float32 (the openai
    client's default, as it is four times smaller)."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector
