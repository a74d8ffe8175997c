"""The uniform local API: the same OpenAI-compatible endpoints whatever engine runs the model.

Same base path (``/v1``), same model id (the snap's name), same request, streaming and error
shapes for llama.cpp, OpenVINO and ONNX Runtime: clients never learn which engine the selector
chose. FastAPI serves it (pydantic models make the OpenAPI document), uvicorn runs it, and it is
the only public listener: llama.cpp engines answer through a supervised llama-server child on a
private Unix socket (:mod:`runtimes.proxy`), the others in this process
(:mod:`runtimes.local`).

Guarantees and where they live:
- errors are OpenAI's ``{"error": {message, type, param, code}}`` with the right status
  (exception handlers below);
- bodies over ``max_body_bytes`` are refused with 413 by :class:`BodyLimit`, which counts the
  bytes actually received, so a lying or missing Content-Length does not get past it;
- ``/health`` answers 200 only once the engine is ready and a warm-up request succeeded, and
  says when llama-server died and is being restarted;
- ``/metrics`` (Prometheus) and CORS (loopback origins unless configured) for every engine;
- ``/`` is a small chat page for people, talking to ``/v1`` like any client.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtimes import schemas as s
from runtimes.base import LoadOptions, RuntimeAdapter, adapter_class
from runtimes.errors import ApiError, error_json
from runtimes.images import ImagePolicy, check_request
from runtimes.local import MAX_EMBEDDING_INPUTS, LocalEngine
from runtimes.metrics import Metrics
from snapcommon.errors import SnapbuildError, UsageError

if TYPE_CHECKING:
    from runtimes.llamaserver import ServingConfig
    from snapbuild.decision import Batching
    from snapbuild.manifest import Manifest

__all__ = ["ApiError", "BodyLimit", "PortInUseError", "bind_socket", "create_app", "run"]

log = logging.getLogger("snapbuild.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
NOT_AN_OBJECT = ("model_attributes_type", "dict_type", "missing")
# loopback pages only, unless the operator configures origins (`<snap> set cors-origins=...`)
LOOPBACK_ORIGINS = r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$"
LIVE_REFRESH_S = 1.0
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
        payload = error_json(
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


class Engine(Protocol):
    """What the gateway needs from an engine (:class:`LocalEngine`, ``LlamaServerEngine``)."""

    notes: list[str]

    @property
    def capabilities(self) -> frozenset[str]:
        """What it does: chat, completion, embeddings."""
        ...

    @property
    def runtime(self) -> str:
        """The runtime id."""
        ...

    async def start(self) -> None:
        """Load and warm up; raise when that fails."""

    async def stop(self) -> None:
        """Release everything."""

    def describe(self) -> dict[str, Any]:
        """What runs (``runtime_info`` in /health)."""
        ...

    def stats(self) -> dict[str, int]:
        """Request counters (``generations`` in /health)."""
        ...

    async def refresh_live(self) -> dict[str, float]:
        """Live gauges: queue depth, busy slots, KV-cache use."""
        ...

    async def chat(self, payload: dict[str, Any], request: Request) -> Response:
        """A validated chat request."""
        ...

    async def completions(self, payload: dict[str, Any], request: Request) -> Response:
        """A validated completion request."""
        ...

    async def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A validated embeddings request."""
        ...


@dataclass
class ServerState:
    """What the endpoints share: the engine, the identity, the load status, the metrics."""

    engine: Engine
    model_id: str
    engine_name: str
    device: str
    context_size: int
    metrics: Metrics
    max_choices: int = 1
    inputs: tuple[str, ...] = ("text",)  # what the engine takes in (images: runtimes.images)
    images: ImagePolicy = field(default_factory=ImagePolicy)
    status: str = "loading"
    detail: str | None = None
    load_error: BaseException | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    live: dict[str, float] = field(default_factory=dict)
    live_at: float = 0.0

    def current(self) -> tuple[str, str | None]:
        """(status, detail) now: a supervised child may have died since the load."""
        status_of = getattr(self.engine, "status", None)
        if self.status == "ok" and callable(status_of):
            status, detail = status_of()
            return str(status), detail
        return self.status, self.detail

    async def live_figures(self) -> dict[str, float]:
        """The engine's gauges, read at most once a second."""
        if time.monotonic() - self.live_at >= LIVE_REFRESH_S and self.status == "ok":
            self.live_at = time.monotonic()
            with contextlib.suppress(Exception):
                self.live = await self.engine.refresh_live()
        return self.live


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.ErrorResponse, "description": text}
    for code, text in (
        (400, "Malformed JSON, context overflow, or an operation the engine does not support"),
        (404, "Unknown model id"),
        (413, "Request body too large"),
        (422, "A field has a wrong type or value"),
        (503, "The model is still loading, failed to load, or its server is restarting"),
    )
}


def create_app(
    engine: Engine | RuntimeAdapter,
    *,
    model_id: str,
    engine_name: str = "main",
    device: str = "cpu",
    context_size: int,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    on_load_error: Callable[[BaseException], None] | None = None,
    cors_origins: Sequence[str] | None = None,
    metrics: Metrics | None = None,
    max_choices: int = 1,
    images: ImagePolicy | None = None,
) -> FastAPI:
    """Build the app around ``engine`` (an in-process adapter is wrapped in a
    :class:`LocalEngine`); it starts (loads, warms up) in the background at startup and answers
    503 until that succeeded. ``cors_origins``: allowed browser origins (``["*"]`` for any);
    None allows loopback pages only."""
    metrics = metrics or Metrics()
    if isinstance(engine, RuntimeAdapter):
        engine = LocalEngine(engine, context_size=context_size, metrics=metrics)
    assert not isinstance(engine, RuntimeAdapter)
    state = ServerState(
        engine,
        model_id,
        engine_name,
        device,
        context_size,
        metrics,
        max_choices=max_choices,
        inputs=tuple(getattr(engine, "inputs", ("text",))),
        images=images or ImagePolicy(),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_start(state, on_load_error))
        yield
        task.cancel()
        await state.engine.stop()

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
    app.add_middleware(CountRequests, metrics=metrics)  # type: ignore[arg-type]
    origins = list(cors_origins or [])
    app.add_middleware(
        CORSMiddleware,  # type: ignore[arg-type]
        allow_origins=origins,
        allow_origin_regex=None if origins else LOOPBACK_ORIGINS,
        allow_methods=["GET", "POST", "OPTIONS"],
        allow_headers=["*"],
        max_age=600,
    )
    return app


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


async def _start(state: ServerState, on_load_error: Callable[[BaseException], None] | None) -> None:
    started = time.monotonic()
    try:
        await state.engine.start()
    except BaseException as exc:
        state.status, state.load_error = "error", exc
        state.detail = exc.brief if isinstance(exc, SnapbuildError) else str(exc)
        log.error("loading %s failed: %s", state.model_id, state.detail)
        if on_load_error is not None:
            on_load_error(exc)
        return
    state.status = "ok"
    log.info(
        "%s ready on %s (%s) in %.1f s; notes: %s",
        state.model_id,
        state.engine_name,
        state.device,
        time.monotonic() - started,
        "; ".join(state.engine.notes) or "none",
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc.errors()).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return ApiError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        return ApiError(500, f"internal error: {exc}", type="server_error").response()


def _validation_error(errors: Sequence[Any]) -> ApiError:
    if any(e.get("type") in NOT_AN_OBJECT and tuple(e.get("loc", ())) == ("body",) for e in errors):
        return ApiError(400, "the request body must be a JSON object", code="invalid_json")
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid")
        ctx = detail.get("ctx") or {}
        return ApiError(
            400,
            f"the request body is not valid JSON: {ctx.get('error', detail.get('msg'))}",
            code="invalid_json",
        )
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    messages = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
        for e in errors[:5]
    )
    return ApiError(
        422, f"invalid request: {messages}", param=".".join(loc) or None, code="invalid_value"
    )


def _install_routes(app: FastAPI, state: ServerState) -> None:
    @app.get("/health", response_model=s.Health, responses={503: {"model": s.Health}})
    async def health() -> JSONResponse:
        """200 once the engine is ready and warmed up; 503 while loading, restarting, or after
        a failure (``detail`` says what happened)."""
        status, detail = state.current()
        body = s.Health(
            status=status,  # type: ignore[arg-type]
            model=state.model_id,
            engine=state.engine_name,
            runtime=state.engine.runtime,
            device=state.device,
            context_size=state.context_size,
            inputs=list(state.inputs),
            detail=detail,
            runtime_info=state.engine.describe(),
            generations=s.QueueStats(**state.engine.stats()),
        )
        return JSONResponse(body.model_dump(), status_code=200 if status == "ok" else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> PlainTextResponse:
        """Prometheus text: requests by status, TTFT and inter-token histograms, tokens/s,
        queue depth, busy slots, KV-cache use."""
        live = await state.live_figures()
        return PlainTextResponse(
            state.metrics.render(live), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    @app.get("/", include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        """A small chat page for people, talking to /v1 with streaming."""
        page = resources.files("runtimes").joinpath("chat.html").read_text(encoding="utf-8")
        return HTMLResponse(page.replace("{{MODEL}}", _html_escape(state.model_id)))

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
        _check_choices(state, body.n)
        payload = await check_request(
            await request.json(), state.images, state.inputs, state.model_id
        )
        return await state.engine.chat(payload, request)

    @app.post(
        "/v1/completions",
        response_model=s.Completion,
        responses={**ERRORS, 200: _stream_doc(s.Completion)},
    )
    async def completions(body: s.CompletionRequest, request: Request) -> Any:
        """Continue a prompt; ``stream: true`` answers server-sent events ending in [DONE]."""
        _check_ready(state, body.model, "completion")
        _check_choices(state, body.n)
        if isinstance(body.prompt, list) and len(body.prompt) != 1:
            raise ApiError(400, "give exactly one prompt per request", param="prompt")
        payload = await request.json()
        if not body.prompt or not (body.prompt if isinstance(body.prompt, str) else body.prompt[0]):
            raise ApiError(400, "the prompt is empty; give some text", param="prompt")
        return await state.engine.completions(payload, request)

    @app.post("/v1/embeddings", response_model=s.EmbeddingList, responses=ERRORS)
    async def embeddings(body: s.EmbeddingRequest, request: Request) -> Any:
        """Embed one text or a list of texts, where the engine computes embeddings."""
        _check_ready(state, body.model, "embeddings")
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts or len(texts) > MAX_EMBEDDING_INPUTS:
            raise ApiError(400, f"give between 1 and {MAX_EMBEDDING_INPUTS} inputs", param="input")
        empty = [i for i, t in enumerate(texts) if not t.strip()]
        if empty:
            where = "input" if isinstance(body.input, str) else f"input[{empty[0]}]"
            raise ApiError(
                400,
                f"{where} is empty: there is nothing to embed",
                param="input",
                code="empty_input",
            )
        return JSONResponse(await state.engine.embeddings(await request.json()))


def _html_escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _stream_doc(chunk: type[Any]) -> dict[str, Any]:
    return {
        "description": "The completion; with stream: true, server-sent events whose data are "
        f"{chunk.__name__} objects, ending with 'data: [DONE]'.",
        "content": {
            "text/event-stream": {"schema": {"$ref": f"#/components/schemas/{chunk.__name__}"}}
        },
    }


def _card(state: ServerState) -> s.ModelCard:
    return s.ModelCard(id=state.model_id, created=state.created, inputs=list(state.inputs))  # type: ignore[arg-type]


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
    if capability not in state.engine.capabilities:
        does = ", ".join(sorted(state.engine.capabilities)) or "nothing"
        raise ApiError(
            400,
            f"the {state.engine_name} engine ({state.engine.runtime}) does not support "
            f"{capability}; it supports: {does}",
            code="unsupported_operation",
        )
    status, detail = state.current()
    if status != "ok":
        raise ApiError(
            503,
            f"the model is not ready ({status}" + (f": {detail}" if detail else "") + "); "
            "check GET /health",
            type="service_unavailable",
            code="model_not_ready",
        )


def _check_choices(state: ServerState, n: int) -> None:
    if n > state.max_choices and not isinstance(state.engine, LocalEngine):
        raise ApiError(
            400,
            f"n={n} is more choices than this server generates at once ({state.max_choices}, "
            "its parallel slots)",
            param="n",
            code="unsupported_parameter",
        )


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
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited: tokens go out at once
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


def build_engine(
    options: LoadOptions,
    *,
    model_id: str,
    metrics: Metrics,
    serving: ServingConfig | None = None,
) -> tuple[Engine, int]:
    """The engine the catalog says serves ``options.runtime``, and how many choices it can
    generate at once: llama.cpp through llama-server, the others in this process."""
    from runtimes.catalog import load_catalog

    entry = load_catalog().get(options.runtime)
    if entry is not None and entry.serving == "llama-server":
        from runtimes.llamaserver import ServingConfig
        from runtimes.proxy import LlamaServerEngine

        config = serving or ServingConfig(
            context_per_slot=options.context_size, threads=options.threads
        )
        engine = LlamaServerEngine(options, config, model_id=model_id, metrics=metrics)
        return engine, config.slots
    adapter = load_adapter(options)
    return LocalEngine(adapter, context_size=options.context_size, metrics=metrics), 1


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
    serving: ServingConfig | None = None,
    llama_root: Path | None = None,
    cors_origins: Sequence[str] | None = None,
    projector_path: Path | None = None,
    images: ImagePolicy | None = None,
    batching: Batching | None = None,
) -> None:
    """Serve ``manifest``'s ``engine_name`` until interrupted (``snapbuild serve``, snap daemon).

    ``serving`` is the selector's serving configuration for llama.cpp engines (slots, context
    per slot, KV-cache type...); ``llama_root`` the llama.cpp component tree holding
    llama-server. Raises :class:`PortInUseError` for a busy port and the engine's
    :class:`~snapcommon.errors.SnapbuildError` when the model fails to load.
    """
    import dataclasses

    import uvicorn

    from runtimes.catalog import load_catalog
    from snapbuild.batching import load_options

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
    if serving is not None:
        serving = dataclasses.replace(
            serving,
            context_per_slot=context_size or serving.context_per_slot,
            threads=threads or serving.threads,
        )
        context = serving.context_per_slot
    sock = bind_socket(host, str(manifest.default_port) if port == "auto" else port)
    bound_port = sock.getsockname()[1]
    metrics = Metrics()
    options = LoadOptions(
        artifact=artifact_path,
        runtime=engine.runtime,
        device=device,
        context_size=context,
        threads=threads,
        llama_root=llama_root,
        chat_template=manifest.model.chat_template,
        projector=projector_path,
        **load_options(engine.runtime, batching),
    )
    chosen, choices = build_engine(
        options, model_id=manifest.name, metrics=metrics, serving=serving
    )
    failure: list[BaseException] = []
    server: uvicorn.Server | None = None

    def on_load_error(exc: BaseException) -> None:
        failure.append(exc)
        if server is not None:
            server.should_exit = True

    app = create_app(
        chosen,
        model_id=manifest.name,
        engine_name=engine.name,
        device=device,
        context_size=context,
        on_load_error=on_load_error,
        cors_origins=cors_origins,
        metrics=metrics,
        max_choices=choices,
        images=images,
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
