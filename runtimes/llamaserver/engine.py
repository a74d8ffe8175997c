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
import dataclasses
import logging
import time
from collections.abc import Callable
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse

from runtimes.chat_templates import TemplateChoice, template_for_file
from runtimes.engine import Call, JsonObject, LoadOptions, Modality, RuntimeFailure, Status
from runtimes.gateway.inputs import items
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.sse import DONE, HEAD_GRACE_S, event, streaming
from runtimes.llamaserver import legacy, toolcalls
from runtimes.llamaserver.callgate import CallGate
from runtimes.llamaserver.counts import RequestCounts
from runtimes.llamaserver.legacy import LegacyShaper
from runtimes.llamaserver.offload import OffloadReport, offload_data, on_device, read_report
from runtimes.llamaserver.relay import ChatShaper, Relay, Shaper, upstream_error
from runtimes.llamaserver.scoring import count_tokens
from runtimes.llamaserver.supervisor import (
    ServerBinary,
    ServingConfig,
    Supervisor,
    find_server,
    server_command,
)
from runtimes.llamaserver.toolcalls import ToolShaper
from runtimes.llamaserver.upstream import (
    cancellable,
    live_figures,
    native_tools,
    newline_tokens,
    post,
    stream_request,
    vocabulary,
    warm_chat,
    warm_embeddings,
)
from runtimes.requests import ChatCompletionRequest, CompletionRequest, EmbeddingRequest

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
        self.requests = RequestCounts(metrics)
        self.native_tools = False  # whether the chat template renders tools (llama-server /props)
        self.offload: OffloadReport | None = None  # where llama-server's log says the model went
        self._vocabulary: int | None = None  # the model's token ids (llama-server /v1/models)
        self.line_breaks: tuple[int, ...] = ()  # tokens an emulated tool reply is kept from
        self._live: dict[str, float] = {}
        metrics.sources.append(lambda: dict(self._live))

    @property
    def runtime(self) -> str:
        """The runtime id."""
        return self.options.runtime

    @property
    def inputs(self) -> tuple[Modality, ...]:
        """What it takes in: images too when a projector (mmproj) is loaded beside the weights."""
        return ("text", "vision") if self.options.projector is not None else ("text",)

    @property
    def max_choices(self) -> int:
        """llama-server generates each choice in a slot of its own, all at once."""
        return self.config.slots

    @property
    def vocabulary(self) -> int | None:
        """The model's vocabulary size, as llama-server reports it once loaded."""
        return self._vocabulary

    # lifecycle -----------------------------------------------------------------------------
    def _binary(self) -> ServerBinary:
        if self._server is None:
            self._server = find_server(self.options.llama_root, self.options.llama_server)
        return self._server

    def _supervisor(
        self, config: ServingConfig, *, embeddings: bool, projector: Path | None = None
    ) -> Supervisor:
        server = self._binary()
        model, device = self.options.artifact.absolute(), self.options.device
        offload, env, note = on_device(self.config.offload, server.binary.parent, server.env())
        if note and note not in self.notes:
            self.notes.append(note)  # a CPU build stands in for the GPU component
        config = dataclasses.replace(config, offload=offload)

        choice = self.template
        # the GGUF's own template needs nothing; the manifest's or the model family's is handed
        # to llama-server, whose built-in fallback (ChatML) would leak its markers into answers
        template = choice.template if choice and choice.source != "gguf" else None

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
            env,
            warm_up=warm_embeddings if embeddings else warm_chat,
            name="llama-server (embeddings)" if embeddings else "llama-server",
            cwd=server.binary.parent,
        )

    async def start(self) -> None:
        """Start llama-server and wait until it is ready and warmed up (or failed to be).

        A projector that is missing or fails to load does not take text down with it:
        llama-server starts again without it and a note says why; the gateway's vision check
        at start then fails, so images are reported and refused, never silently ignored.
        """
        if not self.options.artifact.is_file():
            raise RuntimeFailure(
                f"llama.cpp could not load {self.options.artifact}: no such file",
                resolution="fetch the engine's artifact with `snapbuild fetch`",
            )
        self.notes.clear()  # a start after a failed one (the files changed) begins afresh
        projector = self.options.projector
        problem = None
        if projector is not None and not projector.is_file():
            problem = f"the projector {projector} does not exist"
        main = await self._launch(
            projector.absolute() if projector is not None and problem is None else None
        )
        if not main.ready.is_set() and projector is not None and problem is None:
            problem = f"the projector {projector} failed to load ({_failure(main)})"
            await main.stop()
            main = await self._launch(None)
        if problem is not None:
            self.notes.append(f"{problem}: serving text only, images are refused")
            log.error("%s: serving text only", problem)
        if main.ready.is_set():
            self.offload = read_report(main.state.log) if self.config.offload else None
            if self.offload is not None and (short := self.offload.shortfall()):
                self.notes.append(short)
            self.native_tools = await native_tools(main.client)
            self._vocabulary = await vocabulary(main.client)
            self.line_breaks = await newline_tokens(main.client)
            if not self.native_tools:
                self.notes.append(
                    "the chat template has no tool support: tools are emulated with a JSON schema"
                )
            return
        tail = "\n".join(list(main.state.log)[-8:])
        await main.stop()
        raise RuntimeFailure(
            f"llama-server could not serve {self.options.artifact}",
            details=f"{_failure(main)}\n{tail}".strip(),
            resolution="run `snapbuild validate` on the manifest (it checks the GGUF and "
            "renders its chat template) and check the serving configuration fits in memory",
        )

    async def _launch(self, projector: Path | None) -> Supervisor:
        """The main child, started and through its first attempt (ready, or failed)."""
        self.main = self._supervisor(self.config, embeddings=False, projector=projector)
        self.main.start()
        await self.main.first_attempt.wait()
        return self.main

    async def stop(self) -> None:
        """Stop the children."""
        for child in (self.main, self.embedder):
            if child is not None:
                await child.stop()

    @property
    def ready(self) -> bool:
        """Whether requests can go through now."""
        return self.main is not None and self.main.ready.is_set()

    def status(self) -> tuple[Status, str | None]:
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
            "tool-calls": toolcalls.path(self.native_tools),
            "projector": str(self.options.projector) if self.options.projector else None,
            "notes": list(self.notes),
        }
        if c.offload is not None:
            info["offload"] = offload_data(c.offload, self.offload)
        if self.main is not None:
            info["child"] = {**self.main.state.to_data(), "pid": self.main.pid}
        return info

    def stats(self) -> dict[str, int]:
        """Gateway counters in /health's shape; queued: requests beyond the slots."""
        active = self.requests.active
        queued = max(0, active - self.config.slots)
        return {"active": active, "queued": queued, **self.requests.ended}

    async def refresh_live(self) -> dict[str, float]:
        """Read llama-server's /metrics and /slots into the live gauges."""
        if not self.ready or self.main is None:
            return dict(self._live)
        figures = await live_figures(self.main.client)
        figures["child_restarts"] = float(self.main.state.restarts)
        self._live = figures
        return figures

    # requests ------------------------------------------------------------------------------
    async def chat(self, body: ChatCompletionRequest, call: Call) -> Response:
        """POST /v1/chat/completions through llama-server; tools the template cannot render,
        or whose choice only a JSON schema guarantees, go through the gateway's emulation
        (:mod:`runtimes.llamaserver.toolcalls`)."""
        path, want_usage = "/v1/chat/completions", _wants_usage(body)
        if toolcalls.needs_emulation(body, self.native_tools):
            forwarded = _forwarded(toolcalls.rewrite(call.json, self.line_breaks))
            if not body.stream:
                shaped = toolcalls.whole(self.model_id, emulated=True)
                return await self._answer(path, forwarded, call, shaped)
            shaper: Shaper = ToolShaper(self.model_id, want_usage=want_usage)
            return await self._stream(path, forwarded, shaper)
        payload = call.json
        if body.tools and not self.native_tools:  # tool_choice none: the history as text
            payload = toolcalls.without_tools(payload)
        forwarded = _forwarded(payload)
        if not body.stream:
            shaped = toolcalls.whole(self.model_id, emulated=False)
            return await self._answer(path, forwarded, call, shaped)
        if body.tools and body.tool_choice != "none":  # llama-server's own calls, kept whole
            shaper = CallGate(self.model_id, want_usage=want_usage)
        else:
            shaper = ChatShaper(self.model_id, want_usage=want_usage)
        return await self._stream(path, forwarded, shaper)

    async def completions(self, body: CompletionRequest, call: Call) -> Response:
        """POST /v1/completions as OpenAI's legacy endpoint, from llama-server's native one
        (:mod:`runtimes.llamaserver.legacy`)."""
        assert self.main is not None
        prompts = items(body.prompt)
        shape = await legacy.prepare(self.main.client, body, prompts, call.client_gone)
        if body.max_tokens == 0:
            counts = [await count_tokens(self.main.client, p) for p in prompts]
            answer = legacy.without_generation(shape, counts)
            if not body.stream:
                return JSONResponse(answer)
            chunks = legacy.chunks(answer, _wants_usage(body))
            return streaming(iter([*map(event, chunks), DONE]))
        forwarded = legacy.request(call.json, body.logprobs)
        if not body.stream:
            return await self._answer("/completion", forwarded, call, partial(legacy.answer, shape))
        shaper = LegacyShaper(shape, want_usage=_wants_usage(body))
        return await self._stream("/completion", forwarded, shaper)

    async def embeddings(self, body: EmbeddingRequest, call: Call) -> JsonObject:
        """POST /v1/embeddings through the embedding child (started on first use)."""
        child = await self._embedding_child()
        response = await post(child.client, "/v1/embeddings", _forwarded(call.json))
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
                config = self.config.for_embeddings()
                self.embedder = self._supervisor(config, embeddings=True)
                self.embedder.start()
            child = self.embedder
        await child.first_attempt.wait()
        if not child.ready.is_set():
            await asyncio.wait_for(child.ready.wait(), 60)
        return child

    async def _answer(
        self,
        path: str,
        forwarded: dict[str, Any],
        call: Call,
        shaped: Callable[[Any], dict[str, Any]],
    ) -> Response:
        """One answer llama-server sends whole, in OpenAI's shape (``shaped``), counted and
        timed; 204 when the client hung up first, which cancels llama-server's task with the
        connection."""
        assert self.main is not None
        started = time.monotonic()
        end = self.requests.begin()
        outcome = "failed"
        try:
            data = await cancellable(post(self.main.client, path, forwarded), call.client_gone)
            if data is None:
                outcome = "cancelled"
                return Response(status_code=204)
            if data.status_code >= 400:
                raise upstream_error(data.status_code, data.content, chat=path != "/completion")
            out = shaped(data.json())
            self.metrics.observe("time_to_first_token_seconds", time.monotonic() - started)
            self.metrics.add_tokens(int((out.get("usage") or {}).get("completion_tokens", 0)))
            outcome = "completed"
            return JSONResponse(out)
        finally:
            end(outcome)

    async def _stream(self, path: str, forwarded: dict[str, Any], shaper: Shaper) -> Response:
        """A relayed stream: headers within :data:`HEAD_GRACE_S` (an error llama-server reports
        at once is still a proper status), then its events as they arrive, shaped; the relay
        counts the request out when the stream ends."""
        assert self.main is not None
        if path != "/completion":
            forwarded["stream_options"] = {"include_usage": True}  # metrics need it
        forwarded["stream"] = True
        started = time.monotonic()
        end = self.requests.begin()
        try:
            sending = asyncio.ensure_future(stream_request(self.main.socket, path, forwarded))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(sending), HEAD_GRACE_S)
            if sending.done():
                head = sending.result()
                if head.status_code >= 400:
                    content = await head.aread()
                    await head.aclose()
                    raise upstream_error(head.status_code, content, chat=shaper.chat)
        except BaseException:
            end("failed")
            raise
        relay = Relay(self.metrics, shaper, sending, started, done=end)
        return streaming(relay.events())


def _failure(child: Supervisor) -> str:
    """Why a child never became ready, in one line."""
    return child.state.detail or child.state.last_exit or "unknown"


def _forwarded(payload: JsonObject) -> dict[str, Any]:
    """The client's JSON as llama-server gets it: without ``model`` (llama-server serves one
    model, and the API's id is the snap's name, not llama-server's)."""
    return {k: v for k, v in payload.items() if k != "model"}


def _wants_usage(body: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether the client asked for the usage-only chunk at the end of its stream."""
    return bool(body.stream_options and body.stream_options.include_usage)
