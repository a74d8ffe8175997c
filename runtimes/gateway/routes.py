"""The gateway's endpoints and error handlers, and the state they share.

Every engine answers through these routes, so the API is the same whichever runtime the
selector chose: errors in OpenAI's ``{"error": {message, type, param, code}}`` shape with the
right status, ``/health`` (200 only once the engine is loaded and warmed up), ``/metrics``, the
chat page at ``/``, and ``/v1`` (models, chat, completions, embeddings). The checks that do not
depend on the engine (model id, capability, readiness, choices, images, empty inputs) happen
here, before the engine sees a request. :func:`runtimes.gateway.server.create_app` assembles the
app.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtimes import requests as s
from runtimes.engine import Call, Engine, JsonObject, Modality, Status
from runtimes.gateway import answers as a
from runtimes.gateway.budget import PromptBudget
from runtimes.gateway.errors import ApiError
from runtimes.gateway.images import ImagePolicy, check_request, image_parts
from runtimes.gateway.inputs import check_inputs, check_prompts
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.openapi import describe
from runtimes.gateway.outage import Advice, Outage, Reason, UnavailableEngine
from runtimes.gateway.proofs import refusal
from runtimes.gateway.responses import answers as ra
from runtimes.gateway.responses.request import ResponseRequest
from runtimes.gateway.responses.serve import respond
from runtimes.gateway.responses.store import ResponseStore
from runtimes.gateway.validation import validation_error
from runtimes.requests import MAX_EMBEDDING_INPUTS

__all__ = ["ERRORS", "ServerState", "install_error_handlers", "install_routes"]

log = logging.getLogger("snapbuild.server")

LIVE_REFRESH_S = 1.0


@dataclass
class ServerState:
    """What the endpoints share: the engine, the identity, the load status, the metrics."""

    engine: Engine
    model_id: str
    engine_name: str
    device: str
    context_size: int
    metrics: Metrics
    # the most choices per request; None: the engine's own limit (Engine.max_choices)
    max_choices: int | None = None
    images: ImagePolicy = field(default_factory=ImagePolicy)
    option: str | None = None  # a snap with model options: the one that serves
    budget: PromptBudget | None = None  # the prompt's lower bound, checked before forwarding
    status: Status = "loading"
    detail: str | None = None
    load_error: BaseException | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    responses: ResponseStore = field(default_factory=ResponseStore)  # previous_response_id
    live: dict[str, float] = field(default_factory=dict)
    live_at: float = 0.0
    # the capabilities tried at start (runtimes.gateway.proofs) and why the last start failed
    proofs: dict[str, a.Proof] = field(default_factory=dict)
    failure: Reason = "load-failed"
    advice: Advice = field(default_factory=Advice)

    def current(self) -> tuple[Status, str | None]:
        """(status, detail) now: the load's, then the engine's (a supervised child may have
        died since the load)."""
        if self.status == "ok":
            return self.engine.status()
        return self.status, self.detail

    def outage(self) -> Outage | None:
        """Why the engine is not serving now, with what to do; None while it serves or loads."""
        status, detail = self.current()
        if status in ("ok", "loading"):
            return None
        if isinstance(self.engine, UnavailableEngine):
            return self.engine.outage
        text = detail or status
        if self.status == "error":  # the last start failed: it never served since
            return Outage(self.failure, text, self.advice.load_failed)
        if status == "restarting":
            return Outage("restarting", text, self.advice.restarting)
        return Outage("restart-limit", text, self.advice.restart_limit)

    def inputs(self) -> list[Modality]:
        """What the model takes in and was not refused by its check at start."""
        blind = refusal(self.proofs, "vision") is not None
        return [i for i in self.engine.inputs if not (blind and i == "vision")]

    @property
    def choices_limit(self) -> int | None:
        """The most choices the gateway lets one request ask for (None: the engine checks)."""
        return self.max_choices if self.max_choices is not None else self.engine.max_choices

    async def live_figures(self) -> dict[str, float]:
        """The engine's gauges, read at most once a second."""
        if time.monotonic() - self.live_at >= LIVE_REFRESH_S and self.status == "ok":
            self.live_at = time.monotonic()
            with contextlib.suppress(Exception):
                self.live = await self.engine.refresh_live()
        return self.live


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": a.ErrorResponse, "description": text}
    for code, text in (
        (
            400,
            "Malformed JSON, a field with a wrong type or value (param names it), context "
            "overflow, or an operation the engine does not support",
        ),
        (404, "Unknown model id"),
        (413, "Request body too large"),
        (503, "The model is still loading, failed to load, or its server is restarting"),
    )
}


def install_error_handlers(app: FastAPI) -> None:
    """OpenAI's error shape for API errors, invalid bodies, unknown paths and crashes."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc.errors()).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return ApiError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        return ApiError(500, f"internal error: {exc}", type="server_error").response()


def install_routes(app: FastAPI, state: ServerState) -> None:
    """The endpoints, answering from ``state``."""
    describe(app, [a.ChatCompletionChunk, ra.ResponseEvent])

    @app.get("/health", response_model=a.Health, responses={503: {"model": a.Health}})
    async def health() -> JSONResponse:
        """200 once the engine is ready and warmed up; 503 while loading, restarting, or after
        a failure (``detail`` says what happened)."""
        status, detail = state.current()
        outage = state.outage()
        body = a.Health(
            status=status,
            model=state.model_id,
            engine=state.engine_name,
            runtime=state.engine.runtime,
            device=state.device,
            context_size=state.context_size,
            inputs=state.inputs(),
            detail=detail,
            reason=outage.reason if outage else None,
            resolution=outage.resolution if outage else None,
            capabilities=state.proofs,
            runtime_info=state.engine.describe(),
            generations=a.QueueStats(**state.engine.stats()),
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
        page = resources.files("runtimes.gateway").joinpath("chat.html").read_text(encoding="utf-8")
        return HTMLResponse(page.replace("{{MODEL}}", _html_escape(state.model_id)))

    @app.get("/v1/models", response_model=a.ModelList, responses={503: ERRORS[503]})
    async def models() -> a.ModelList:
        """The one model this server serves; its id is the snap's name (503 while the engine
        cannot serve it: the message says why and what to do)."""
        _check_serving(state)
        return a.ModelList(data=[_card(state)])

    @app.get("/v1/models/{model}", response_model=a.ModelCard, responses=ERRORS)
    async def model(model: str) -> a.ModelCard:
        """One model by id."""
        _check_model(state, model)
        _check_serving(state)
        return _card(state)

    @app.post(
        "/v1/chat/completions",
        response_model=a.ChatCompletion,
        responses={**ERRORS, 200: _stream_doc(a.ChatCompletionChunk)},
    )
    async def chat(body: s.ChatCompletionRequest, request: Request) -> Any:
        """Chat with the model; ``stream: true`` answers server-sent events ending in [DONE]."""
        _check_ready(state, body.model, "chat")
        _check_choices(state, body.n)
        if state.budget is not None:
            state.budget.check_chat(body)
        payload = await request.json()
        _check_proven(state, body, payload)
        body, payload = await _checked_images(state, body, payload)
        return await state.engine.chat(body, _call(payload, request))

    @app.post(
        "/v1/completions",
        response_model=a.Completion,
        responses={**ERRORS, 200: _stream_doc(a.Completion)},
    )
    async def completions(body: s.CompletionRequest, request: Request) -> Any:
        """Continue a prompt; ``stream: true`` answers server-sent events ending in [DONE]."""
        _check_ready(state, body.model, "completion")
        _check_choices(state, body.n)
        check_prompts(body.prompt, state.engine.vocabulary, state.engine.runtime)
        if state.budget is not None:
            state.budget.check_completion(body)
        return await state.engine.completions(body, _call(await request.json(), request))

    @app.post(
        "/v1/responses",
        response_model=ra.ResponseObject,
        responses={**ERRORS, 200: _stream_doc(ra.ResponseEvent)},
    )
    async def responses(body: ResponseRequest, request: Request) -> Any:
        """OpenAI's Responses API, answered by the model's chat: text and images in, function
        tools, ``text.format``, ``stream: true`` for typed events, ``previous_response_id``
        for responses this process kept."""
        _check_ready(state, body.model, "chat")

        async def chat(payload: dict[str, Any]) -> Response:
            try:
                checked = s.ChatCompletionRequest.model_validate(payload)
            except ValidationError as exc:
                raise validation_error(exc.errors()) from exc
            checked, shown = await _checked_images(state, checked, payload)
            return await state.engine.chat(checked, _call(shown, request))

        return await respond(body, state.model_id, state.responses, chat)

    @app.get("/v1/responses/{response_id}", response_model=ra.ResponseObject, responses=ERRORS)
    async def stored_response(response_id: str) -> JSONResponse:
        """A response this process kept (``store`` was not false)."""
        stored = state.responses.find(response_id)
        if stored is None:
            raise ApiError(404, f"no stored response with id {response_id!r}",
                           param="response_id", code="not_found")  # fmt: skip
        return JSONResponse(stored.response)

    @app.post("/v1/embeddings", response_model=a.EmbeddingList, responses=ERRORS)
    async def embeddings(body: s.EmbeddingRequest, request: Request) -> Any:
        """Embed one text or a list of texts, where the engine computes embeddings."""
        _check_ready(state, body.model, "embeddings")
        engine = state.engine
        check_inputs(body.input, MAX_EMBEDDING_INPUTS, engine.vocabulary, engine.runtime)
        call = _call(await request.json(), request)
        return JSONResponse(await state.engine.embeddings(body, call))


def _call(payload: JsonObject, request: Request) -> Call:
    """What the engine may use of the connection: the checked JSON, and whether the client
    hung up (never the Starlette request itself)."""
    return Call(json=payload, client_gone=request.is_disconnected)


async def _checked_images(
    state: ServerState, body: s.ChatCompletionRequest, payload: dict[str, Any]
) -> tuple[s.ChatCompletionRequest, JsonObject]:
    """The body and its JSON with every image checked and rewritten as a canonical ``data:``
    URL; the body is validated again from the rewritten JSON only when it had images, so an
    in-process engine reads the checked bytes, never the client's URL."""
    if not image_parts(payload):
        return body, payload
    checked = await check_request(payload, state.images, state.engine.inputs, state.model_id)
    return s.ChatCompletionRequest.model_validate(checked), checked


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


def _card(state: ServerState) -> a.ModelCard:
    return a.ModelCard(
        id=state.model_id,
        created=state.created,
        inputs=state.inputs(),
        capabilities=state.proofs,
        option=state.option,
    )


def _check_serving(state: ServerState) -> None:
    """The outage's 503 while the engine cannot serve (not while it is still loading)."""
    outage = state.outage()
    if outage is not None:
        raise outage.error()


def _check_proven(state: ServerState, body: s.ChatCompletionRequest, payload: JsonObject) -> None:
    """A 400 for a request that needs a capability whose check failed at start."""
    tools = refusal(state.proofs, "tools") if body.tools and body.tool_choice != "none" else None
    vision = refusal(state.proofs, "vision") if image_parts(dict(payload)) else None
    refused = tools or vision
    if refused is not None:
        raise refused


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
    _check_serving(state)
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
    limit = state.choices_limit
    if limit is not None and n > limit:
        raise ApiError(
            400,
            f"n={n} is more choices than this server generates at once ({limit}, "
            "its parallel slots)",
            param="n",
            code="unsupported_parameter",
        )
