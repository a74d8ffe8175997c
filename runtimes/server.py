"""The uniform local API: the same OpenAI-compatible endpoints whatever engine runs the model.

Same base path (``/v1``), same model id (the snap's name), same request, streaming and error
shapes for llama.cpp, OpenVINO and ONNX Runtime: clients never learn which engine the selector
chose. FastAPI serves it (pydantic models make the OpenAPI document), uvicorn runs it.

Guarantees and where they live:
- errors are OpenAI's ``{"error": {message, type, param, code}}`` with the right status
  (exception handlers below);
- bodies over ``max_body_bytes`` are refused with 413 by :class:`BodyLimit`, which counts the
  bytes actually received, so a lying or missing Content-Length does not get past it;
- one generation at a time per engine, first come first served, a disconnect cancels its
  generation (:mod:`runtimes.scheduler`);
- ``/health`` answers 200 only once the model is loaded and a warm-up request succeeded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtimes import schemas as s
from runtimes.base import (
    Delta,
    LoadOptions,
    Message,
    RuntimeAdapter,
    SamplingParams,
    UnsupportedError,
    Usage,
    adapter_class,
)
from runtimes.scheduler import EngineQueue
from snapbuild.errors import SnapbuildError, UsageError

if TYPE_CHECKING:
    from snapbuild.manifest import Manifest

log = logging.getLogger("snapbuild.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_EMBEDDING_INPUTS = 2048
NOT_AN_OBJECT = ("model_attributes_type", "dict_type", "missing")
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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
        error = s.ErrorBody(message=self.message, type=self.type, param=self.param, code=self.code)
        return {"error": error.model_dump()}


def _error_json(status: int, message: str, **kwargs: Any) -> bytes:
    return json.dumps(ApiError(status, message, **kwargs).body()).encode()


class BodyLimit:
    """Pure ASGI middleware: read the whole request body, refuse it with 413 past ``limit``.

    It counts received bytes (chunked uploads and false Content-Length headers included), then
    replays the body to the app, whose later ``receive`` calls go to the server as usual (that
    is how disconnects are noticed).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

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
        while True:
            message = await receive()
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
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, size: int) -> None:
        payload = _error_json(
            413,
            f"request body too large: more than {self.limit} bytes (got at least {size}); "
            "send smaller requests",
            code="request_too_large",
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


@dataclass
class ServerState:
    """What the endpoints share: the adapter, its queue, the identity, the load status."""

    adapter: RuntimeAdapter
    model_id: str
    engine: str
    device: str
    context_size: int
    queue: EngineQueue | None = None
    status: str = "loading"
    detail: str | None = None
    load_error: BaseException | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    created: int = field(default_factory=lambda: int(time.time()))


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.ErrorResponse, "description": text}
    for code, text in (
        (400, "Malformed JSON, context overflow, or an operation the engine does not support"),
        (404, "Unknown model id"),
        (413, "Request body too large"),
        (422, "A field has a wrong type or value"),
        (503, "The model is still loading or failed to load"),
    )
}


def create_app(
    adapter: RuntimeAdapter,
    *,
    model_id: str,
    engine: str,
    device: str,
    context_size: int,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    on_load_error: Callable[[BaseException], None] | None = None,
) -> FastAPI:
    """Build the app around ``adapter``; it loads (when not loaded yet) and warms up in the
    background at startup, answering 503 until both succeeded."""
    state = ServerState(adapter, model_id, engine, device, context_size)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.queue = EngineQueue()
        task = asyncio.create_task(_load_and_warm(state, on_load_error))
        yield
        task.cancel()
        state.queue.shutdown()

    app = FastAPI(
        title=f"{model_id} (snapbuild)",
        version="1",
        description=f"OpenAI-compatible API of the {model_id} inference snap.",
        lifespan=lifespan,
    )
    app.state.snapbuild = state
    _install_error_handlers(app)
    _install_routes(app, state)
    app.add_middleware(BodyLimit, limit=max_body_bytes)  # type: ignore[arg-type]
    return app


async def _load_and_warm(
    state: ServerState, on_load_error: Callable[[BaseException], None] | None
) -> None:
    assert state.queue is not None

    def load_and_warm() -> None:
        if not getattr(state.adapter, "_snapbuild_loaded", False):
            state.adapter.load()
            state.adapter._snapbuild_loaded = True  # type: ignore[attr-defined]
        state.adapter.warm_up()

    started = time.monotonic()
    try:
        await state.queue.call(load_and_warm)
    except BaseException as exc:
        state.status, state.load_error = "error", exc
        state.detail = exc.brief if isinstance(exc, SnapbuildError) else str(exc)
        log.error("loading %s failed: %s", state.model_id, state.detail)
        if on_load_error is not None:
            on_load_error(exc)
        return
    state.status = "ok"
    state.ready.set()
    log.info(
        "%s ready on %s (%s) in %.1f s; notes: %s",
        state.model_id,
        state.engine,
        state.device,
        time.monotonic() - started,
        "; ".join(state.adapter.notes) or "none",
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(
            e.get("type") in NOT_AN_OBJECT and tuple(e.get("loc", ())) == ("body",) for e in errors
        ):
            return ApiError(
                400, "the request body must be a JSON object", code="invalid_json"
            ).response()
        if any(e.get("type") == "json_invalid" for e in errors):
            detail = next(e for e in errors if e.get("type") == "json_invalid")
            ctx = detail.get("ctx") or {}
            return ApiError(
                400,
                f"the request body is not valid JSON: {ctx.get('error', detail.get('msg'))}",
                code="invalid_json",
            ).response()
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        messages = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
            for e in errors[:5]
        )
        return ApiError(
            422, f"invalid request: {messages}", param=".".join(loc) or None, code="invalid_value"
        ).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return ApiError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        return ApiError(500, f"internal error: {exc}", type="server_error").response()


def _install_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health", response_model=s.Health, responses={503: {"model": s.Health}})
    async def health() -> JSONResponse:
        """200 once the model is loaded and warmed up; 503 while loading or after a failure."""
        body = s.Health(
            status=state.status,  # type: ignore[arg-type]
            model=state.model_id,
            engine=state.engine,
            runtime=state.adapter.options.runtime,
            device=state.device,
            context_size=state.context_size,
            detail=state.detail,
            runtime_info=state.adapter.describe(),
            generations=s.QueueStats(**(state.queue.stats() if state.queue else _no_stats())),
        )
        return JSONResponse(body.model_dump(), status_code=200 if state.status == "ok" else 503)

    @app.get("/v1/models", response_model=s.ModelList)
    async def models() -> s.ModelList:
        """The one model this server serves; its id is the snap's name."""
        return s.ModelList(data=[_card(state)])

    @app.get("/v1/models/{model}", response_model=s.ModelCard, responses=ERRORS)
    async def model(model: str) -> s.ModelCard:
        """One model by id."""
        _check_model(state, model)
        return _card(state)

    @app.post(
        "/v1/chat/completions",
        response_model=s.ChatCompletion,
        responses={**ERRORS, 200: _stream_doc(s.ChatCompletionChunk)},
    )
    async def chat(body: s.ChatCompletionRequest, request: Request) -> Any:
        """Chat with the model; ``stream: true`` answers server-sent events ending in [DONE]."""
        _check_ready(state, body.model, "chat")
        messages = [Message(m.role, m.text()) for m in body.messages]
        params = _params(body, body.max_completion_tokens or body.max_tokens)
        adapter = state.adapter

        def start(cancel: threading.Event) -> Iterator[Delta]:
            _check_context(state, adapter.count_chat_tokens(messages), params, "messages")
            return adapter.chat(messages, params, cancel)

        return await _generate(state, request, start, body, chat=True)

    @app.post(
        "/v1/completions",
        response_model=s.Completion,
        responses={**ERRORS, 200: _stream_doc(s.Completion)},
    )
    async def completions(body: s.CompletionRequest, request: Request) -> Any:
        """Continue a prompt; ``stream: true`` answers server-sent events ending in [DONE]."""
        _check_ready(state, body.model, "completion")
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise ApiError(400, "give exactly one prompt per request", param="prompt")
        prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
        params = _params(body, body.max_tokens)
        adapter = state.adapter

        def start(cancel: threading.Event) -> Iterator[Delta]:
            _check_context(state, adapter.count_tokens(prompt), params, "prompt")
            return adapter.complete(prompt, params, cancel)

        return await _generate(state, request, start, body, chat=False)

    @app.post("/v1/embeddings", response_model=s.EmbeddingList, responses=ERRORS)
    async def embeddings(body: s.EmbeddingRequest) -> s.EmbeddingList:
        """Embed one text or a list of texts, where the engine computes embeddings."""
        _check_ready(state, body.model, "embeddings")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts or len(texts) > MAX_EMBEDDING_INPUTS:
            raise ApiError(400, f"give between 1 and {MAX_EMBEDDING_INPUTS} inputs", param="input")
        assert state.queue is not None
        result = await state.queue.call(lambda: state.adapter.embed(texts))
        return s.EmbeddingList(
            data=[
                s.EmbeddingItem(index=i, embedding=_encode(v, body.encoding_format))
                for i, v in enumerate(result.vectors)
            ],
            model=state.model_id,
            usage=s.UsageInfo(
                prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens
            ),
        )


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    """OpenAI's encodings: a JSON list, or base64 of little-endian float32 (the openai
    client's default, as it is four times smaller)."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def _no_stats() -> dict[str, int]:
    return {"active": 0, "queued": 0, "completed": 0, "cancelled": 0, "failed": 0}


def _stream_doc(chunk: type[Any]) -> dict[str, Any]:
    return {
        "description": "The completion; with stream: true, server-sent events whose data are "
        f"{chunk.__name__} objects, ending with 'data: [DONE]'.",
        "content": {
            "text/event-stream": {"schema": {"$ref": f"#/components/schemas/{chunk.__name__}"}}
        },
    }


def _card(state: ServerState) -> s.ModelCard:
    return s.ModelCard(id=state.model_id, created=state.created)


def _check_model(state: ServerState, model: str) -> None:
    if model != state.model_id:
        raise ApiError(
            404,
            f"the model {model!r} does not exist; this server serves {state.model_id!r}",
            param="model",
            code="model_not_found",
        )


def _check_ready(state: ServerState, model: str, capability: str) -> None:
    _check_model(state, model)
    if capability not in state.adapter.capabilities:
        does = ", ".join(sorted(state.adapter.capabilities)) or "nothing"
        raise ApiError(
            400,
            f"the {state.engine} engine ({state.adapter.options.runtime}) does not support "
            f"{capability}; it supports: {does}",
            code="unsupported_operation",
        )
    if state.status != "ok":
        raise ApiError(
            503,
            f"the model is not ready ({state.status}"
            + (f": {state.detail}" if state.detail else "")
            + "); check GET /health",
            type="service_unavailable",
            code="model_not_ready",
        )


def _params(
    body: s.ChatCompletionRequest | s.CompletionRequest, max_tokens: int | None
) -> SamplingParams:
    if body.logit_bias:
        raise ApiError(
            400,
            "logit_bias is not supported by this server",
            param="logit_bias",
            code="unsupported_parameter",
        )
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


def _check_context(
    state: ServerState, prompt_tokens: int, params: SamplingParams, param: str
) -> None:
    limit = state.context_size
    wanted = prompt_tokens + (params.max_tokens or 0)
    if prompt_tokens >= limit or wanted > limit:
        asked = (
            f"{wanted} tokens ({prompt_tokens} in the {param}, {params.max_tokens} for the "
            "completion)"
            if params.max_tokens
            else f"{prompt_tokens} tokens in the {param}"
        )
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{asked}. Please reduce the length of the {param} or max_tokens.",
            param=param,
            code="context_length_exceeded",
        )


async def _watch_disconnect(request: Request, cancel: threading.Event) -> None:
    while not cancel.is_set():
        if await request.is_disconnected():
            cancel.set()
            return
        await asyncio.sleep(0.1)


async def _generate(
    state: ServerState,
    request: Request,
    start: Callable[[threading.Event], Iterator[Delta]],
    body: s.ChatCompletionRequest | s.CompletionRequest,
    *,
    chat: bool,
) -> Any:
    """Queue the generation; answer JSON, or SSE once the first delta exists.

    Waiting for the first delta before answering lets errors found in the worker (context
    overflow) still be proper JSON errors with their status.
    """
    assert state.queue is not None
    cancel = threading.Event()
    watcher = asyncio.create_task(_watch_disconnect(request, cancel))
    deltas = state.queue.stream(start, cancel)
    try:
        first = await deltas.__anext__()
    except StopAsyncIteration:  # cancelled while queued: the client is gone, answer nothing
        watcher.cancel()
        return Response(status_code=204)
    except BaseException:
        watcher.cancel()
        await deltas.aclose()
        raise
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    if not body.stream:
        try:
            pieces = [first]
            async for delta in deltas:
                pieces.append(delta)
        finally:
            watcher.cancel()
            await deltas.aclose()
        return _whole(state, ident, created, pieces, chat)
    watcher.cancel()  # from here Starlette notices disconnects and closes the stream
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    events = _events(state, ident, created, first, deltas, chat=chat, include_usage=include_usage)
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def _finish(pieces: Sequence[Delta]) -> tuple[str | None, Usage]:
    last = pieces[-1]
    usage = last.usage or Usage(prompt_tokens=0)
    reason = last.finish_reason if last.finish_reason in ("stop", "length") else "stop"
    return reason, usage


def _usage(usage: Usage) -> s.UsageInfo:
    return s.UsageInfo(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
    )


def _whole(
    state: ServerState, ident: str, created: int, pieces: Sequence[Delta], chat: bool
) -> Any:
    text = "".join(p.text for p in pieces)
    reason, usage = _finish(pieces)
    if chat:
        return s.ChatCompletion(
            id=ident,
            created=created,
            model=state.model_id,
            choices=[s.ChatChoice(message=s.AssistantMessage(content=text), finish_reason=reason)],  # type: ignore[arg-type]
            usage=_usage(usage),
        )
    return s.Completion(
        id=ident,
        created=created,
        model=state.model_id,
        choices=[s.CompletionChoice(text=text, finish_reason=reason)],  # type: ignore[arg-type]
        usage=_usage(usage),
    )


def _sse(model: Any) -> bytes:
    return b"data: " + model.model_dump_json().encode() + b"\n\n"


async def _events(
    state: ServerState,
    ident: str,
    created: int,
    first: Delta,
    deltas: AsyncGenerator[Delta, None],
    *,
    chat: bool,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The SSE body: a role chunk (chat), one chunk per delta, a final chunk with the finish
    reason and usage, an optional usage-only chunk (``stream_options.include_usage``), [DONE]."""

    def chunk(text: str | None, reason: str | None = None, usage: Usage | None = None) -> bytes:
        info = _usage(usage) if usage else None
        if chat:
            delta = (
                s.ChunkDelta(content=text)
                if text is not None
                else s.ChunkDelta(role="assistant", content="")
            )
            return _sse(
                s.ChatCompletionChunk(
                    id=ident,
                    created=created,
                    model=state.model_id,
                    choices=[s.ChunkChoice(delta=delta, finish_reason=reason)],  # type: ignore[arg-type]
                    usage=info,
                )
            )
        return _sse(
            s.Completion(
                id=ident,
                created=created,
                model=state.model_id,
                choices=[s.CompletionChoice(text=text or "", finish_reason=reason)],  # type: ignore[arg-type]
                usage=info,
            )
        )

    try:
        if chat:
            yield chunk(None)
        last = first
        if first.text:
            yield chunk(first.text)
        async for current in deltas:  # drained to the end, so the worker counts it completed
            last = current
            if current.text:
                yield chunk(current.text)
        reason, usage = _finish([last])
        yield chunk("" if chat else "", reason, usage)
        if include_usage:
            usage_only: Any
            if chat:
                usage_only = s.ChatCompletionChunk(
                    id=ident, created=created, model=state.model_id, choices=[], usage=_usage(usage)
                )
            else:
                usage_only = s.Completion(
                    id=ident, created=created, model=state.model_id, choices=[], usage=_usage(usage)
                )
            yield _sse(usage_only)
    except ApiError as exc:
        yield b"data: " + json.dumps(exc.body()).encode() + b"\n\n"
    except UnsupportedError as exc:
        yield b"data: " + json.dumps(ApiError(400, exc.brief).body()).encode() + b"\n\n"
    except Exception as exc:  # the stream has started: report in-band, keep the server up
        log.exception("generation failed mid-stream")
        body = ApiError(500, f"generation failed: {exc}", type="server_error").body()
        yield b"data: " + json.dumps(body).encode() + b"\n\n"
    finally:
        await deltas.aclose()
    yield b"data: [DONE]\n\n"


# --- running ---------------------------------------------------------------------------------


class PortInUseError(UsageError):
    """The requested port is taken by another program."""


def bind_socket(host: str, port: int | str) -> socket.socket:
    """Bind ``host:port`` (a string: the first free port from that one up; ``"auto"``: from
    8080 up) before loading
    anything, so a busy port is reported at once and clearly."""
    if port == "auto" or isinstance(port, str):
        start = 8080 if port == "auto" else int(port)
        for candidate in range(start, min(start + 200, 65536)):
            with contextlib.suppress(PortInUseError):
                return bind_socket(host, candidate)
        raise PortInUseError(f"no free port on {host} between {start} and {start + 199}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            why = "already in use" if exc.errno == errno.EADDRINUSE else "not allowed for this user"
            raise PortInUseError(
                f"port {port} on {host} is {why}",
                resolution="choose another port with --port N, or --port auto to take the next "
                "free one",
            ) from exc
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    return sock


def load_adapter(options: LoadOptions) -> RuntimeAdapter:
    """Instantiate the catalog's adapter for ``options.runtime`` (not loaded yet)."""
    return adapter_class(options.runtime)(options)


def run(
    manifest: Manifest,
    engine_name: str,
    *,
    host: str = "127.0.0.1",
    port: int | str = 8080,
    context_size: int | None = None,
    threads: int | None = None,
    artifact_path: Path,
    log_level: str = "info",
    on_listening: Callable[[str, int], None] | None = None,
) -> None:
    """Serve ``manifest``'s ``engine_name`` until interrupted (``snapbuild serve``, snap daemon).

    Raises :class:`PortInUseError` for a busy port and the adapter's
    :class:`~snapbuild.errors.SnapbuildError` when the model fails to load.
    """
    import uvicorn

    from runtimes.catalog import load_catalog

    engine = manifest.engine(engine_name)
    if engine is None:
        raise UsageError(
            f"manifest {manifest.name!r} has no engine {engine_name!r}",
            details="engines: " + ", ".join(e.name for e in manifest.engines),
        )
    entry = load_catalog().get(engine.runtime)
    device = entry.device if entry else "cpu"
    context = context_size or engine.context_size or manifest.default_context_size
    if manifest.model.context_length:
        context = min(context, manifest.model.context_length)
    sock = bind_socket(host, str(manifest.default_port) if port == "auto" else port)
    bound_port = sock.getsockname()[1]
    adapter = load_adapter(
        LoadOptions(
            artifact=artifact_path,
            runtime=engine.runtime,
            device=device,
            context_size=context,
            threads=threads,
            chat_template=manifest.model.chat_template,
        )
    )
    failure: list[BaseException] = []
    server: uvicorn.Server | None = None

    def on_load_error(exc: BaseException) -> None:
        failure.append(exc)
        if server is not None:
            server.should_exit = True

    app = create_app(
        adapter,
        model_id=manifest.name,
        engine=engine.name,
        device=device,
        context_size=context,
        on_load_error=on_load_error,
    )
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    if on_listening is not None:
        on_listening(host, bound_port)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if failure:
        exc = failure[0]
        if isinstance(exc, SnapbuildError):
            raise exc
        raise SnapbuildError(f"{engine.runtime} could not load {artifact_path}", details=str(exc))
