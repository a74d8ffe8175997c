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
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from runtimes.declared import Capability
from runtimes.engine import Engine, LoadOptions
from runtimes.gateway.budget import PromptBudget, gguf_budget
from runtimes.gateway.errors import ApiError
from runtimes.gateway.images import ImagePolicy
from runtimes.gateway.lifecycle import Readiness, Startup, start
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.middleware import BodyLimit, CountRequests
from runtimes.gateway.outage import Advice, Outage, UnavailableEngine
from runtimes.gateway.protocol import LIMITS as CONNECTION_LIMITS
from runtimes.gateway.protocol import ConnectionLimits, http_protocol
from runtimes.gateway.routes import ServerState, install_error_handlers, install_routes
from runtimes.inprocess.adapter import RuntimeAdapter, adapter_class
from runtimes.inprocess.engine import LocalEngine
from runtimes.llamaserver.supervisor import ServingConfig
from snapcommon.errors import UsageError

__all__ = [
    "ApiError",
    "FallbackOptions",
    "PortInUseError",
    "ServeOptions",
    "bind_socket",
    "build_engine",
    "create_app",
    "run",
    "run_unavailable",
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
    # the capabilities the manifest declares for this engine, proven at start (proofs.py)
    declared: tuple[Capability, ...] = ()
    advice: Advice = field(default_factory=Advice)  # what to do, in the caller's words
    unix_socket: Path | None = None  # the same API on a Unix socket too (the snap's)
    option: str | None = None  # a snap with model options: the one that serves (/v1/models)

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
    max_choices: int | None = None,
    images: ImagePolicy | None = None,
    loaded: bool = False,
    startup: Startup | None = None,
    option: str | None = None,
    budget: PromptBudget | None = None,
    connection: ConnectionLimits = CONNECTION_LIMITS,
) -> FastAPI:
    """Build the app around ``engine`` (an in-process adapter is wrapped in a
    :class:`LocalEngine`); it starts (loads, warms up) in the background at startup and answers
    503 until that succeeded. ``cors_origins``: allowed browser origins (``["*"]`` for any);
    None allows loopback pages only. ``max_choices``: the most choices per request, where not
    the engine's own (:attr:`Engine.max_choices`). ``loaded``: the adapter given is loaded
    already (a test serving the adapter it also calls directly), so startup only warms it up.
    ``startup``: what to prove before ready, which files to watch after a failed load, whom to
    tell (:class:`~runtimes.gateway.lifecycle.Startup`; default: nothing)."""
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
        images=images or ImagePolicy(),
        option=option,
        budget=budget,
    )
    startup = startup or Startup(on_load_error=on_load_error)
    state.advice = startup.advice

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(start(state, startup))
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
) -> Engine:
    """The engine the catalog's ``serving`` says serves ``options.runtime``: llama-server as a
    supervised child (every llama.cpp entry), or the entry's ``adapter`` in this process."""
    from runtimes.catalog import load_catalog

    entry = load_catalog().get(options.runtime)
    if entry is not None and entry.serving == "llama-server":
        from runtimes.llamaserver.engine import LlamaServerEngine

        config = serving or ServingConfig(
            context_per_slot=options.context_size, threads=options.threads
        )
        return LlamaServerEngine(options, config, model_id=model_id, metrics=metrics)
    adapter = load_adapter(options)
    return LocalEngine(adapter, context_size=options.context_size, metrics=metrics)


def run(
    options: ServeOptions,
    *,
    on_listening: Callable[[str, int], None] | None = None,
    on_ready: Callable[[Readiness], None] | None = None,
) -> None:
    """Serve ``options`` until interrupted (``snapbuild serve``, the snap daemon).

    The port is bound before anything loads, and stays: a model that fails to load (or whose
    text check fails) is answered with a 503 that says why and what to do, and loaded again
    when its files change. Raises :class:`PortInUseError` for a busy port. ``on_ready`` hears
    :func:`~runtimes.gateway.lifecycle.readiness` after each start attempt.
    """
    sockets = listen(options.host, options.port, options.unix_socket)
    metrics = Metrics()
    load = options.load
    chosen = build_engine(load, model_id=options.model_id, metrics=metrics, serving=options.serving)
    startup = Startup(
        declared=options.declared,
        watch=tuple(p for p in (load.artifact, load.projector) if p is not None),
        advice=options.advice,
        on_ready=on_ready,
    )
    budget = gguf_budget(load.artifact, load.context_size)  # None: not a GGUF
    app = create_app(
        chosen,
        model_id=options.model_id,
        engine_name=options.engine_name,
        device=load.device,
        context_size=load.context_size,
        cors_origins=options.cors_origins,
        metrics=metrics,
        images=options.images,
        startup=startup,
        budget=budget,
        option=options.option,
    )
    _serve(app, sockets, options.log_level, on_listening)


@dataclass(frozen=True)
class FallbackOptions:
    """A server with no engine: the model id, the outage, where to listen."""

    model_id: str
    outage: Outage
    engine_name: str = "none"
    host: str = "127.0.0.1"
    port: int | str = 8080
    unix_socket: Path | None = None
    cors_origins: tuple[str, ...] | None = None
    log_level: str = "info"


def run_unavailable(
    options: FallbackOptions, *, on_listening: Callable[[str, int], None] | None = None
) -> None:
    """Serve only the outage until interrupted: ``/health`` 503 with the reason, every ``/v1``
    route an OpenAI-shaped 503 saying what failed and what to do (no engine fits, the operator
    disabled it, the engine's files are not there). Nothing is loaded."""
    sockets = listen(options.host, options.port, options.unix_socket)
    app = create_app(
        UnavailableEngine(options.outage),
        model_id=options.model_id,
        engine_name=options.engine_name,
        device="none",
        context_size=0,
        cors_origins=options.cors_origins,
    )
    _serve(app, sockets, options.log_level, on_listening)


def listen(host: str, port: int | str, unix_socket: Path | None) -> list[socket.socket]:
    """The TCP socket (:func:`bind_socket`), and the Unix socket when one is asked for; a Unix
    socket that cannot be made is logged and left out, the TCP port being the API's address."""
    sockets = [bind_socket(host, port)]
    if unix_socket is not None:
        try:
            sockets.append(bind_unix(unix_socket))
        except OSError as exc:  # (a read-only directory, a path over 107 bytes)
            log.warning("not listening on the Unix socket %s: %s", unix_socket, exc)
    return sockets


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (a stale socket left by a killed server is replaced;
    any other file there is an error). Mode 0666: any local user may connect, as any local user
    may reach the loopback TCP port."""
    if path.is_socket():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o666)
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    return sock


def _serve(
    app: FastAPI,
    sockets: list[socket.socket],
    log_level: str,
    on_listening: Callable[[str, int], None] | None,
) -> None:
    """Run uvicorn on the bound sockets until interrupted; close (and remove) them after."""
    import uvicorn

    config = uvicorn.Config(
        app, log_level=log_level, timeout_graceful_shutdown=3, http=http_protocol()
    )
    server = uvicorn.Server(config)
    if on_listening is not None:
        host, port = sockets[0].getsockname()[:2]
        on_listening(str(host), int(port))
    try:
        server.run(sockets=sockets)
    finally:
        for sock in sockets:
            path = sock.getsockname() if sock.family == socket.AF_UNIX else None
            sock.close()
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)
