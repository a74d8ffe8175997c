"""The uniform local API: the same OpenAI-compatible endpoints whatever engine runs the model.

Same base path (``/v1``), same model id (the snap's name), same request, streaming and error
shapes for llama.cpp, OpenVINO and ONNX Runtime: clients never learn which engine the selector
chose. FastAPI serves it (pydantic models make the OpenAPI document), uvicorn runs it, and it is
the only public listener: llama.cpp engines answer through a supervised llama-server child on a
private Unix socket (:mod:`runtimes.llamaserver.engine`), the others in this process
(:mod:`runtimes.inprocess.engine`).

Guarantees and where they live:
- errors are OpenAI's ``{"error": {message, type, param, code}}`` with the right status, and
  every endpoint and check is in :mod:`runtimes.gateway.routes`;
- bodies over ``max_body_bytes`` are refused with 413 by
  :class:`~runtimes.gateway.middleware.BodyLimit`, which counts the bytes actually received, so a
  lying
  or missing Content-Length does not get past it;
- ``/health`` answers 200 only once the engine is ready and a warm-up request succeeded, and
  says when llama-server died and is being restarted;
- ``/metrics`` (Prometheus) and CORS (loopback origins unless configured) for every engine;
- ``/`` is a small chat page for people, talking to ``/v1`` like any client.

This module assembles the app (:func:`create_app`) and runs it (:func:`run`). ``run`` takes a
:class:`ServeOptions` that its caller built from what it decided and loaded (the selector's
Decision, the manifest, the operator's settings: :mod:`snapbuild.serving.launch`), so the runtime
layer
applies no selection rule of its own and imports nothing above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from runtimes.engine import LoadOptions
from runtimes.gateway.budget import PromptBudget, gguf_budget
from runtimes.gateway.errors import ApiError
from runtimes.gateway.images import ImagePolicy
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.middleware import BodyLimit, CountRequests
from runtimes.gateway.protocol import LIMITS as CONNECTION_LIMITS
from runtimes.gateway.protocol import ConnectionLimits, http_protocol
from runtimes.gateway.routes import Engine, ServerState, install_error_handlers, install_routes
from runtimes.inprocess.adapter import RuntimeAdapter, adapter_class
from runtimes.inprocess.engine import LocalEngine
from runtimes.llamaserver.supervisor import ServingConfig
from snapcommon.errors import SnapbuildError, UsageError

__all__ = [
    "ApiError",
    "PortInUseError",
    "ServeOptions",
    "bind_socket",
    "build_engine",
    "create_app",
    "run",
]

log = logging.getLogger("snapbuild.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# loopback pages only, unless the operator configures origins (`<snap> set cors-origins=...`)
LOOPBACK_ORIGINS = r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$"


@dataclass(frozen=True)
class ServeOptions:
    """Everything :func:`run` serves, decided and loaded by its caller.

    ``load.context_size`` is the context served (per slot, for llama-server engines), chosen by
    the selector or the operator: the server applies it, it does not re-derive it. ``serving``
    is llama-server's configuration for llama.cpp engines (None: one slot at that context).
    """

    model_id: str  # the API's model id: the snap's (manifest's) name
    engine_name: str  # the manifest's engine, reported in /health
    load: LoadOptions  # the artifact, runtime, device, context, threads, batching plan...
    serving: ServingConfig | None = None
    host: str = "127.0.0.1"
    port: int | str = 8080  # a string: the first free port from that number up
    cors_origins: tuple[str, ...] | None = None  # None: loopback pages only
    images: ImagePolicy = field(default_factory=ImagePolicy)
    log_level: str = "info"

    def __post_init__(self) -> None:
        if self.serving is not None and self.serving.context_per_slot != self.load.context_size:
            raise ValueError(
                f"llama-server's context per slot ({self.serving.context_per_slot}) differs "
                f"from the context served ({self.load.context_size})"
            )


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
    loaded: bool = False,
    budget: PromptBudget | None = None,
    connection: ConnectionLimits = CONNECTION_LIMITS,
) -> FastAPI:
    """Build the app around ``engine`` (an in-process adapter is wrapped in a
    :class:`LocalEngine`); it starts (loads, warms up) in the background at startup and answers
    503 until that succeeded. ``cors_origins``: allowed browser origins (``["*"]`` for any);
    None allows loopback pages only. ``loaded``: the adapter given is loaded already (a test
    serving the adapter it also calls directly), so startup only warms it up."""
    metrics = metrics or Metrics()
    if isinstance(engine, RuntimeAdapter):
        engine = LocalEngine(engine, context_size=context_size, metrics=metrics, loaded=loaded)
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
        budget=budget,
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
    install_error_handlers(app)
    install_routes(app, state)
    app.add_middleware(BodyLimit, limit=max_body_bytes, seconds=connection.body_s)  # type: ignore[arg-type]
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
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror}",
            resolution="give --host an address of this machine: 127.0.0.1 (this machine only), "
            "0.0.0.0 (every interface) or one that `ip -brief address` lists",
        ) from exc
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
        from runtimes.llamaserver.engine import LlamaServerEngine

        config = serving or ServingConfig(
            context_per_slot=options.context_size, threads=options.threads
        )
        engine = LlamaServerEngine(options, config, model_id=model_id, metrics=metrics)
        return engine, config.slots
    adapter = load_adapter(options)
    return LocalEngine(adapter, context_size=options.context_size, metrics=metrics), 1


def run(options: ServeOptions, *, on_listening: Callable[[str, int], None] | None = None) -> None:
    """Serve ``options`` until interrupted (``snapbuild serve``, the snap daemon).

    The port is bound before anything loads. Raises :class:`PortInUseError` for a busy port and
    the engine's :class:`~snapcommon.errors.SnapbuildError` when the model fails to load.
    """
    import uvicorn

    sock = bind_socket(options.host, options.port)
    bound_port = sock.getsockname()[1]
    metrics = Metrics()
    load = options.load
    chosen, choices = build_engine(
        load, model_id=options.model_id, metrics=metrics, serving=options.serving
    )
    failure: list[BaseException] = []
    server: uvicorn.Server | None = None
    budget = gguf_budget(load.artifact, load.context_size)  # None: not a GGUF

    def on_load_error(exc: BaseException) -> None:
        failure.append(exc)
        if server is not None:
            server.should_exit = True

    app = create_app(
        chosen,
        model_id=options.model_id,
        engine_name=options.engine_name,
        device=load.device,
        context_size=load.context_size,
        on_load_error=on_load_error,
        cors_origins=options.cors_origins,
        metrics=metrics,
        max_choices=choices,
        images=options.images,
        budget=budget,
    )
    config = uvicorn.Config(
        app, log_level=options.log_level, timeout_graceful_shutdown=3, http=http_protocol()
    )
    server = uvicorn.Server(config)
    if on_listening is not None:
        on_listening(options.host, bound_port)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if failure:
        exc = failure[0]
        if isinstance(exc, SnapbuildError):
            raise exc
        raise SnapbuildError(f"{load.runtime} could not load {load.artifact}", details=str(exc))
