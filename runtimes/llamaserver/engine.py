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
import logging
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx
from fastapi import Request, Response
from fastapi.responses import JSONResponse

from runtimes.chat_templates import TemplateChoice, template_for_file
from runtimes.engine import LoadOptions, RuntimeFailure
from runtimes.gateway.errors import ApiError
from runtimes.gateway.metrics import Metrics, parse_prometheus, slot_figures
from runtimes.gateway.sse import DONE, HEAD_GRACE_S, event, streaming
from runtimes.llamaserver import toolcalls
from runtimes.llamaserver.relay import Relay, fix_whole, upstream_error
from runtimes.llamaserver.supervisor import (
    ServerBinary,
    ServingConfig,
    Supervisor,
    find_server,
    server_command,
)
from runtimes.llamaserver.upstream import (
    cancellable,
    native_tools,
    post,
    stream_request,
    warm_chat,
    warm_embeddings,
)

log = logging.getLogger("snapbuild.runtimes.proxy")


class LlamaServerEngine:
    """llama-server children (chat/completions, and a lazily started embedding one)."""

    ALL_CAPABILITIES = frozenset({"chat", "completion", "embeddings"})

    @cached_property
    def template(self) -> TemplateChoice | None:
        """The chat template llama-server must use (runtimes.chat_templates), None if unknown
        here."""
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
            warm_up=warm_embeddings if embeddings else warm_chat,
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
            self.native_tools = await native_tools(self.main.client)
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
                resolution="run `snapbuild validate` on the manifest (it checks the GGUF and "
                "renders its chat template) and check the serving configuration fits in memory",
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
        template has none, :mod:`runtimes.llamaserver.toolcalls`)."""
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
            data = await cancellable(post(self.main.client, "/v1/chat/completions", body), request)
            if data is None:
                kind = "cancelled"
                return Response(status_code=204)
            if data.status_code >= 400:
                raise upstream_error(data.status_code, data.content, chat=True)
            out: dict[str, Any] = data.json()
            fix_whole(out, self.model_id, chat=True)
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
        return streaming(iter([*map(event, toolcalls.as_stream(out, want_usage)), DONE]))

    async def completions(self, payload: dict[str, Any], request: Request) -> Response:
        """POST /v1/completions through llama-server."""
        return await self._generate("/v1/completions", payload, request, chat=False)

    async def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/embeddings through the embedding child (started on first use)."""
        child = await self._embedding_child()
        body = {k: v for k, v in payload.items() if k != "model"}
        response = await post(child.client, "/v1/embeddings", body)
        if response.status_code >= 400:
            raise upstream_error(response.status_code, response.content, param="input")
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
                data = await cancellable(post(client, path, body), request)
                if data is None:
                    done("cancelled")
                    return Response(status_code=204)
                if data.status_code >= 400:
                    raise upstream_error(data.status_code, data.content, chat=chat)
                out: dict[str, Any] = data.json()
                fix_whole(out, self.model_id, chat=chat)
                elapsed = time.monotonic() - started
                self.metrics.observe("time_to_first_token_seconds", elapsed)
                self.metrics.add_tokens(int((out.get("usage") or {}).get("completion_tokens", 0)))
                done("completed")
                return JSONResponse(out)
            sending = asyncio.ensure_future(stream_request(self.main.socket, path, body))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(sending), HEAD_GRACE_S)
            if sending.done():
                head = sending.result()
                if head.status_code >= 400:
                    content = await head.aread()
                    await head.aclose()
                    raise upstream_error(head.status_code, content, chat=chat)
        except ApiError:
            done("failed")
            raise
        except BaseException:
            done("failed")
            raise
        relay = Relay(
            self.metrics,
            self.model_id,
            sending,
            started,
            chat=chat,
            want_usage=want_usage,
            done=done,
        )
        return streaming(relay.events())
