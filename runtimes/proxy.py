"""The llama.cpp engine behind the gateway: requests go to a supervised llama-server.

The gateway validates a request (our pydantic schemas: the same 4xx for every engine), then
forwards the client's own JSON, so everything llama-server implements (grammars for
``response_format``, ``tools`` with ``--jinja``, ``logprobs``, ``n``, ``seed``, stop strings)
reaches it unchanged. What comes back is relayed as it arrives, each event adjusted to OpenAI's
published shapes: our model id, ``logprobs: null`` and ``message.refusal: null`` present, no
``"role": null``, usage only where OpenAI puts it, llama.cpp's debugging fields dropped.

Streams answer their HTTP headers at once (within :data:`HEAD_GRACE_S`, which lets an error
that llama-server reports before the first token still be a proper 4xx) and send SSE comments
while the request waits for a slot, so clients and proxies do not time out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx
from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from runtimes import toolcalls
from runtimes.base import LoadOptions, RuntimeFailure
from runtimes.errors import ApiError
from runtimes.llamaserver import (
    ServerBinary,
    ServingConfig,
    Supervisor,
    find_server,
    server_command,
)
from runtimes.metrics import Metrics, parse_prometheus, slot_figures
from runtimes.templates import TemplateChoice, template_for_file
from runtimes.upstream import Stream, open_stream

log = logging.getLogger("snapbuild.runtimes.proxy")

try:  # orjson: several times faster on the per-token path; the stdlib where it is missing
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
    _dumps: Callable[[Any], bytes] = orjson.dumps
except ImportError:  # pragma: no cover - orjson is a dependency of the serve extra
    _loads = json.loads

    def _dumps(data: Any) -> bytes:
        return json.dumps(data, separators=(",", ":")).encode()


HEAD_GRACE_S = 0.25
KEEPALIVE_S = 2.0
DROPPED = ("timings", "__verbose", "prompt_progress")
ERROR_CODES = {
    "exceed_context_size_error": "context_length_exceeded",
    "not_supported_error": "unsupported_parameter",
    "unavailable_error": "model_not_ready",
    "invalid_request_error": "invalid_value",
}


class LlamaServerEngine:
    """llama-server children (chat/completions, and a lazily started embedding one)."""

    ALL_CAPABILITIES = frozenset({"chat", "completion", "embeddings"})

    @cached_property
    def template(self) -> TemplateChoice | None:
        """The chat template llama-server must use (runtimes.templates), None if unknown here."""
        return template_for_file(self.options.artifact, self.options.chat_template)

    @property
    def capabilities(self) -> frozenset[str]:
        """No chat when neither the manifest, the GGUF nor the model family gives a template:
        completions still work, chat is a clear 400 instead of answers with leaked markers."""
        choice = self.template
        if choice is not None and choice.template is None:
            return self.ALL_CAPABILITIES - {"chat"}
        return self.ALL_CAPABILITIES

    def __init__(
        self,
        options: LoadOptions,
        config: ServingConfig,
        *,
        model_id: str,
        metrics: Metrics,
        server: ServerBinary | None = None,
    ) -> None:
        self.options = options
        self.config = config
        self.model_id = model_id
        self.metrics = metrics
        self._server = server
        self.notes: list[str] = []
        self.main: Supervisor | None = None
        self.embedder: Supervisor | None = None
        self._embed_lock = asyncio.Lock()
        self.counts = {"completed": 0, "cancelled": 0, "failed": 0}
        self.active = 0
        self.native_tools = False  # whether the chat template renders tools (llama-server /props)
        self._live: dict[str, float] = {}
        metrics.sources.append(lambda: dict(self._live))

    @property
    def runtime(self) -> str:
        """The runtime id."""
        return self.options.runtime

    @property
    def inputs(self) -> tuple[str, ...]:
        """What it takes in: images too when a projector (mmproj) is loaded beside the weights."""
        return ("text", "vision") if self.options.projector is not None else ("text",)

    # lifecycle -----------------------------------------------------------------------------
    def _binary(self) -> ServerBinary:
        if self._server is None:
            self._server = find_server(self.options.llama_root, self.options.llama_server)
        return self._server

    def _supervisor(self, config: ServingConfig, *, embeddings: bool) -> Supervisor:
        server = self._binary()
        model, device = self.options.artifact, self.options.device

        choice = self.template
        # the GGUF's own template needs nothing; the manifest's or the model family's is handed
        # to llama-server, whose built-in fallback (ChatML) would leak its markers into answers
        template = choice.template if choice and choice.source != "gguf" else None
        projector = self.options.projector

        def command(socket: str) -> list[str]:
            args = server_command(
                server, model, config, socket, device=device, embeddings=embeddings
            )
            if projector is not None and not embeddings:
                args += ["--mmproj", str(projector)]
            if template and not embeddings:  # the manifest's template wins over the GGUF's
                path = Path(socket).with_name("chat-template.jinja")
                path.write_text(template, encoding="utf-8")
                args += ["--chat-template-file", str(path)]
            return args

        return Supervisor(
            command,
            server.env(),
            warm_up=_warm_embeddings if embeddings else _warm_chat,
            name="llama-server (embeddings)" if embeddings else "llama-server",
        )

    async def start(self) -> None:
        """Start llama-server and wait until it is ready and warmed up (or failed to be)."""
        if not self.options.artifact.is_file():
            raise RuntimeFailure(
                f"llama.cpp could not load {self.options.artifact}: no such file",
                resolution="fetch the engine's artifact with `snapbuild fetch`",
            )
        projector = self.options.projector
        if projector is not None and not projector.is_file():
            raise RuntimeFailure(
                f"llama.cpp could not load the projector {projector}: no such file",
                resolution="fetch the engine's projector artifact with `snapbuild fetch`",
            )
        self.main = self._supervisor(self.config, embeddings=False)
        self.main.start()
        await self.main.first_attempt.wait()
        if self.main.ready.is_set():
            self.native_tools = await _native_tools(self.main.client)
            if not self.native_tools:
                self.notes.append(
                    "the chat template has no tool support: tools are emulated with a JSON schema"
                )
        else:
            state = self.main.state
            detail = state.detail or state.last_exit or "unknown"
            tail = "\n".join(list(state.log)[-8:])
            await self.main.stop()
            raise RuntimeFailure(
                f"llama-server could not serve {self.options.artifact}",
                details=f"{detail}\n{tail}".strip(),
                resolution="check the file is a complete GGUF (snapbuild fetch verifies "
                "checksums) and that the serving configuration fits in memory",
            )

    async def stop(self) -> None:
        """Stop the children."""
        for child in (self.main, self.embedder):
            if child is not None:
                await child.stop()

    @property
    def ready(self) -> bool:
        """Whether requests can go through now."""
        return self.main is not None and self.main.ready.is_set()

    def status(self) -> tuple[str, str | None]:
        """(status, detail) for /health."""
        if self.main is None:
            return "loading", None
        state = self.main.state
        if state.status == "ok" and self.main.ready.is_set():
            return "ok", None
        if state.status == "ok":  # it died a moment ago; the supervisor is about to say so
            return "restarting", f"{self.main.name} stopped answering"
        if state.status in ("restarting", "starting") and state.restarts:
            return "restarting", state.detail
        return ("loading" if state.status == "starting" else "error"), state.detail

    def describe(self) -> dict[str, Any]:
        """What runs, for /health and status."""
        c = self.config
        info: dict[str, Any] = {
            "runtime": self.options.runtime,
            "artifact": str(self.options.artifact),
            "device": self.options.device,
            "server": "llama-server",
            "slots": c.slots,
            "context-size": c.context_per_slot,
            "context-per-slot": c.context_per_slot,
            "kv-cache-type": c.kv_cache_type,
            "flash-attention": c.flash_attention,
            "cache-reuse": c.cache_reuse,
            "threads": c.threads,
            "capabilities": sorted(self.capabilities),
            "projector": str(self.options.projector) if self.options.projector else None,
            "notes": list(self.notes),
        }
        if self.main is not None:
            info["child"] = {**self.main.state.to_data(), "pid": self.main.pid}
        return info

    def stats(self) -> dict[str, int]:
        """Gateway counters in /health's shape; queued: requests beyond the slots."""
        return {
            "active": self.active,
            "queued": max(0, self.active - self.config.slots),
            **self.counts,
        }

    async def refresh_live(self) -> dict[str, float]:
        """Read llama-server's /metrics and /slots into the live gauges."""
        if not self.ready or self.main is None:
            return dict(self._live)
        figures: dict[str, float] = {}
        with contextlib.suppress(httpx.HTTPError, ValueError):
            text = (await self.main.client.get("/metrics", timeout=2)).text
            upstream = parse_prometheus(text)
            figures["queue_depth"] = upstream.get("requests_deferred", 0.0)
            figures["llama_prompt_tokens_per_second"] = upstream.get("prompt_tokens_seconds", 0.0)
            figures["llama_predicted_tokens_per_second"] = upstream.get(
                "predicted_tokens_seconds", 0.0
            )
        with contextlib.suppress(httpx.HTTPError, ValueError):
            slots = (await self.main.client.get("/slots", timeout=2)).json()
            if isinstance(slots, list):
                figures.update(slot_figures(slots))
        figures["child_restarts"] = float(self.main.state.restarts)
        self._live = figures
        return figures

    # requests ------------------------------------------------------------------------------
    async def chat(self, payload: dict[str, Any], request: Request) -> Response:
        """POST /v1/chat/completions through llama-server (tools emulated where the model's
        template has none, :mod:`runtimes.toolcalls`)."""
        if toolcalls.needs_emulation(payload, self.native_tools):
            return await self._emulated_tools(payload, request)
        return await self._generate("/v1/chat/completions", payload, request, chat=True)

    async def _emulated_tools(self, payload: dict[str, Any], request: Request) -> Response:
        assert self.main is not None
        body = toolcalls.rewrite(payload)
        body.pop("model", None)
        started = time.monotonic()
        self.active += 1
        self.metrics.in_flight(1)
        kind = "failed"
        try:
            data = await _cancellable(
                _post(self.main.client, "/v1/chat/completions", body), request
            )
            if data is None:
                kind = "cancelled"
                return Response(status_code=204)
            if data.status_code >= 400:
                raise _upstream_error(data.status_code, data.content, chat=True)
            out: dict[str, Any] = data.json()
            _fix_whole(out, self.model_id, chat=True)
            toolcalls.restore(out)
            self.metrics.observe("time_to_first_token_seconds", time.monotonic() - started)
            self.metrics.add_tokens(int((out.get("usage") or {}).get("completion_tokens", 0)))
            kind = "completed"
        finally:
            self.active -= 1
            self.counts[kind] += 1
            self.metrics.in_flight(-1)
        if not payload.get("stream"):
            return JSONResponse(out)
        want_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        events = [_sse(c) for c in toolcalls.as_stream(out, want_usage)] + [b"data: [DONE]\n\n"]
        return StreamingResponse(iter(events), media_type="text/event-stream")

    async def completions(self, payload: dict[str, Any], request: Request) -> Response:
        """POST /v1/completions through llama-server."""
        return await self._generate("/v1/completions", payload, request, chat=False)

    async def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/embeddings through the embedding child (started on first use)."""
        child = await self._embedding_child()
        body = {k: v for k, v in payload.items() if k != "model"}
        response = await _post(child.client, "/v1/embeddings", body)
        if response.status_code >= 400:
            raise _upstream_error(response.status_code, response.content, param="input")
        data: dict[str, Any] = response.json()
        data["model"] = self.model_id
        for item in data.get("data", []):
            item.setdefault("object", "embedding")
        return data

    async def _embedding_child(self) -> Supervisor:
        async with self._embed_lock:
            if self.embedder is None:
                ctx = self.config.context_per_slot
                config = ServingConfig(
                    slots=1,
                    context_per_slot=ctx,
                    kv_cache_type="f16",
                    flash_attention=self.config.flash_attention,
                    cache_reuse=0,
                    threads=self.config.threads,
                    gpu_layers=self.config.gpu_layers,
                    batch_size=ctx,  # the whole context in one batch: pooled over all of it
                )
                self.embedder = self._supervisor(config, embeddings=True)
                self.embedder.start()
            child = self.embedder
        await child.first_attempt.wait()
        if not child.ready.is_set():
            await asyncio.wait_for(child.ready.wait(), 60)
        return child

    async def _generate(
        self, path: str, payload: dict[str, Any], request: Request, *, chat: bool
    ) -> Response:
        assert self.main is not None
        client = self.main.client
        stream = bool(payload.get("stream"))
        want_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        body = {k: v for k, v in payload.items() if k != "model"}
        if stream:
            body["stream_options"] = {"include_usage": True}  # metrics need it; stripped below
        started = time.monotonic()
        self.active += 1
        self.metrics.in_flight(1)
        finished = [False]

        def done(kind: str) -> None:
            if not finished[0]:
                finished[0] = True
                self.active -= 1
                self.counts[kind] += 1
                self.metrics.in_flight(-1)

        try:
            if not stream:
                data = await _cancellable(_post(client, path, body), request)
                if data is None:
                    done("cancelled")
                    return Response(status_code=204)
                if data.status_code >= 400:
                    raise _upstream_error(data.status_code, data.content, chat=chat)
                out: dict[str, Any] = data.json()
                _fix_whole(out, self.model_id, chat=chat)
                elapsed = time.monotonic() - started
                self.metrics.observe("time_to_first_token_seconds", elapsed)
                self.metrics.add_tokens(int((out.get("usage") or {}).get("completion_tokens", 0)))
                done("completed")
                return JSONResponse(out)
            sending = asyncio.ensure_future(_open(self.main.socket, path, body))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(sending), HEAD_GRACE_S)
            if sending.done():
                head = sending.result()
                if head.status_code >= 400:
                    content = await head.aread()
                    await head.aclose()
                    raise _upstream_error(head.status_code, content, chat=chat)
        except ApiError:
            done("failed")
            raise
        except BaseException:
            done("failed")
            raise
        relay = _Relay(self, sending, started, chat=chat, want_usage=want_usage, done=done)
        return StreamingResponse(
            relay.events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


class _Relay:
    """One stream's events, relayed from llama-server as they arrive."""

    def __init__(
        self,
        engine: LlamaServerEngine,
        sending: asyncio.Future[Stream],
        started: float,
        *,
        chat: bool,
        want_usage: bool,
        done: Callable[[str], None],
    ) -> None:
        self.engine = engine
        self.sending = sending
        self.started = started
        self.chat = chat
        self.want_usage = want_usage
        self.done = done
        self.usage: dict[str, Any] | None = None
        self.last_piece: float | None = None

    async def events(self) -> AsyncIterator[bytes]:
        outcome = "cancelled"
        response: Stream | None = None
        try:
            if not self.sending.done():
                yield b": connected\n\n"  # headers now, while the request waits for a slot
            while not self.sending.done():
                await asyncio.wait({self.sending}, timeout=KEEPALIVE_S)
                if not self.sending.done():
                    yield b": waiting for a free slot\n\n"
            response = self.sending.result()
            if response.status_code >= 400:
                error = _upstream_error(
                    response.status_code, await response.aread(), chat=self.chat
                )
                yield _sse(error.body())
                outcome = "failed"
            else:
                async for event in self._upstream(response):
                    yield event
                outcome = "completed"
        except ApiError as exc:
            yield _sse(exc.body())
            outcome = "failed"
        except OSError as exc:
            yield _sse(
                ApiError(503, f"llama-server stopped answering: {exc}", type="server_error").body()
            )
            outcome = "failed"
        finally:
            if not self.sending.done():
                self.sending.cancel()
            if response is not None:
                await response.aclose()
            self.done(outcome)
        yield b"data: [DONE]\n\n"

    async def _upstream(self, response: Stream) -> AsyncIterator[bytes]:
        """Our events for llama-server's, one write for all that arrived together."""
        events = _SseEvents()
        try:
            async for piece in response.pieces():
                out: list[bytes] = []
                for data in events.feed(piece):
                    if data == b"[DONE]":
                        break
                    event = _loads(data)
                    if "error" in event:
                        out.append(_sse(_error_from(event["error"], chat=self.chat).body()))
                        yield b"".join(out)
                        return
                    out.extend(self._relayed(event))
                if out:
                    yield b"".join(out)
        finally:
            if self.usage is not None:
                self.engine.metrics.add_tokens(int(self.usage.get("completion_tokens", 0)))

    def _relayed(self, event: dict[str, Any]) -> list[bytes]:
        """One upstream event as our SSE events, noting usage and token timings."""
        metrics = self.engine.metrics
        out = []
        for item in _fix_chunk(event, self.engine.model_id, chat=self.chat):
            if "usage" in item and not item.get("choices"):
                self.usage = item["usage"]
                if not self.want_usage:
                    continue
            elif _has_text(item):
                now = time.monotonic()
                if self.last_piece is None:
                    metrics.observe("time_to_first_token_seconds", now - self.started)
                else:
                    metrics.observe("inter_token_latency_seconds", now - self.last_piece)
                self.last_piece = now
            out.append(_sse(item))
        return out


def _has_text(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content") or delta.get("tool_calls"):
            return True
    return False


class _SseEvents:
    """The ``data:`` payloads of an SSE body fed piece by piece, as raw bytes, in arrival order
    (split by hand: cheaper than decoding and splitting lines, which matters on a machine whose
    cores also run llama-server)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, piece: bytes) -> list[bytes]:
        pending = self.pending + piece
        found = []
        while (cut := pending.find(b"\n\n")) >= 0:
            event, pending = pending[:cut], pending[cut + 2 :]
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    found.append(line[6:].strip())
        self.pending = pending
        return found


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + _dumps(data) + b"\n\n"


def _fix_whole(data: dict[str, Any], model_id: str, *, chat: bool) -> None:
    """A whole response in OpenAI's published shape."""
    data["model"] = model_id
    for key in DROPPED:
        data.pop(key, None)
    for choice in data.get("choices", []):
        _fix_logprobs(choice, chat=chat)
        if chat:
            message = choice.setdefault("message", {})
            message.setdefault("refusal", None)
            if message.get("content") is None and not message.get("tool_calls"):
                message["content"] = ""


def _fix_logprobs(choice: dict[str, Any], *, chat: bool) -> None:
    """``logprobs`` present (null when not asked for); a chat choice's object also has
    ``refusal`` (OpenAI's schema requires both lists)."""
    logprobs = choice.setdefault("logprobs", None)
    if chat and isinstance(logprobs, dict):
        logprobs.setdefault("content", None)
        logprobs.setdefault("refusal", None)


def _fix_chunk(event: dict[str, Any], model_id: str, *, chat: bool) -> list[dict[str, Any]]:
    """One upstream stream event as OpenAI chunks: a completion's final event carries usage,
    which OpenAI sends in a separate usage-only chunk."""
    event["model"] = model_id
    for key in DROPPED:
        event.pop(key, None)
    choices = event.get("choices") or []
    for choice in choices:
        _fix_logprobs(choice, chat=chat)
        if chat:
            delta = choice.setdefault("delta", {})
            if "role" in delta and delta["role"] is None:
                del delta["role"]
            if "content" in delta and delta["content"] is None and not delta.get("tool_calls"):
                delta["content"] = ""
    usage = event.pop("usage", None) if choices else event.get("usage")
    if choices and usage is not None:
        return [
            event,
            {**{k: v for k, v in event.items() if k != "choices"}, "choices": [], "usage": usage},
        ]
    return [event]


def _upstream_error(
    status: int, content: bytes, *, chat: bool = True, param: str | None = None
) -> ApiError:
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError):
        error = {"message": content.decode("utf-8", "replace")[:500]}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    error.setdefault("code", status)
    return _error_from(error, chat=chat, param=param)


def _error_from(error: dict[str, Any], *, chat: bool, param: str | None = None) -> ApiError:
    """llama-server's error object as ours: its status, our codes, the field named."""
    status = int(error.get("code") or 500) if str(error.get("code", "")).isdigit() else 500
    kind = str(error.get("type") or "")
    message = str(error.get("message") or "llama-server failed")
    code = ERROR_CODES.get(kind)
    if kind == "exceed_context_size_error":
        param = param or ("messages" if chat else "prompt")
        n_ctx = error.get("n_ctx")
        asked = error.get("n_prompt_tokens")
        if n_ctx is not None:
            message = (
                f"This model's maximum context length is {n_ctx} tokens. However, you "
                f"requested {asked} tokens in the {param}. Please reduce the length of the "
                f"{param} or max_tokens."
            )
    elif "too large to process" in message or "exceeds the available context" in message:
        code, status = "context_length_exceeded", 400
    if status == 501:
        status = 400  # what an engine cannot do is the client's 400, naming what was asked
    typ = "invalid_request_error" if status < 500 else "server_error"
    if status == 503:
        typ = "service_unavailable"
    return ApiError(status, message, type=typ, param=param, code=code)


async def _open(socket: str, path: str, body: dict[str, Any]) -> Stream:
    """Open a streamed request; a child that is not answering is a 503, not a crash."""
    try:
        return await open_stream(socket, path, _dumps(body))
    except (OSError, TimeoutError) as exc:
        raise ApiError(
            503,
            f"llama-server is not answering ({exc.__class__.__name__}); it is being restarted, "
            "check GET /health",
            type="service_unavailable",
            code="model_not_ready",
        ) from exc


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST to llama-server; a child that is not answering is a 503, not a crash."""
    try:
        return await client.post(path, json=body)
    except httpx.HTTPError as exc:
        raise ApiError(
            503,
            f"llama-server is not answering ({exc.__class__.__name__}); it is being restarted, "
            "check GET /health",
            type="service_unavailable",
            code="model_not_ready",
        ) from exc


async def _cancellable(call: Any, request: Request) -> httpx.Response | None:
    """Await ``call``; cancel it (closing the upstream connection, which stops llama-server's
    task) when the client hangs up first. None when it did."""
    task = asyncio.ensure_future(call)
    while True:
        finished, _ = await asyncio.wait({task}, timeout=0.1)
        if finished:
            result: httpx.Response = task.result()
            return result
        if await request.is_disconnected():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return None


async def _native_tools(client: httpx.AsyncClient) -> bool:
    """Whether llama-server's chat template renders tools and tool calls itself."""
    try:
        caps = (await client.get("/props", timeout=10)).json().get("chat_template_caps") or {}
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return bool(caps.get("supports_tools") and caps.get("supports_tool_calls"))


async def _warm_chat(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/completions", json={"prompt": "Hello", "max_tokens": 1, "seed": 0}, timeout=300
    )
    if response.status_code != 200:
        raise RuntimeError(f"warm-up answered {response.status_code}: {response.text[:300]}")


async def _warm_embeddings(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"input": "Hello"}, timeout=300)
    if response.status_code != 200:
        raise RuntimeError(f"warm-up answered {response.status_code}: {response.text[:300]}")
