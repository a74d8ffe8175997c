"""Why the engine is not serving, and what to do about it: the port's answer meanwhile.

A client that meets a dead port learns nothing; one that meets a 503 whose message names the
cause and the fix can tell its user. So whenever the engine is not serving (nothing fits the
machine, the weights fail to load, the engine's child is restarting or past its restart limit,
the operator disabled it), the gateway keeps its port and answers ``/health`` and every ``/v1``
route with an :class:`Outage`. What to do is said in the caller's words (:class:`Advice`): the
snap's daemon names the ``<snap>`` commands, ``snapbuild serve`` its own.

:class:`UnavailableEngine` is the engine of a server that has no engine at all (no fit,
disabled): it satisfies the :class:`~runtimes.engine.Engine` protocol so the very same app and
routes serve the outage, and a client sees one API whatever happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from starlette.responses import Response

from runtimes.engine import Call, JsonObject, Modality, Status
from runtimes.gateway.errors import ApiError
from runtimes.requests import ChatCompletionRequest, CompletionRequest, EmbeddingRequest

Reason = Literal[
    "no-fit", "load-failed", "check-failed", "restarting", "restart-limit", "disabled", "failed"
]
# the error code a client sees for each reason (OpenAI's shape has no other field for it)
CODES: dict[str, str] = {
    "no-fit": "no_engine_fits",
    "load-failed": "model_load_failed",
    "check-failed": "model_check_failed",
    "restarting": "model_not_ready",  # transient, as while loading: retry
    "restart-limit": "restart_limit_reached",
    "disabled": "engine_disabled",
    "failed": "engine_unavailable",
}


@dataclass(frozen=True)
class Outage:
    """The engine is not serving: ``reason`` (a :data:`Reason`), what happened, what to do."""

    reason: Reason
    detail: str
    resolution: str

    def error(self) -> ApiError:
        """The OpenAI-shaped 503 every ``/v1`` route answers meanwhile."""
        return ApiError(
            503,
            f"the model is not being served: {self.detail.rstrip('.')}. {self.resolution}",
            type="service_unavailable",
            code=CODES[self.reason],
        )

    def to_data(self) -> dict[str, str]:
        """JSON-ready (the daemon's status note, the discovery document)."""
        return {"reason": self.reason, "detail": self.detail, "resolution": self.resolution}


@dataclass(frozen=True)
class Advice:
    """What to do for the outages the gateway finds by itself, in its caller's words."""

    load_failed: str = (
        "Check that the model file is complete and of the right format (`snapbuild fetch` "
        "verifies checksums); the server loads it again when the file changes."
    )
    restarting: str = "Retry in a few seconds: the engine restarts by itself."
    restart_limit: str = "Read the server's log for why the engine keeps exiting, then restart it."


class UnavailableEngine:
    """The engine of a server with no engine: every request is refused with its outage.

    The gateway refuses requests before an engine sees them while the status is not ``ok``, so
    the request methods are never reached; they refuse too, in case a caller bypasses that.
    """

    capabilities = frozenset({"chat", "completion", "embeddings"})  # refused by the outage
    inputs: tuple[Modality, ...] = ("text",)
    max_choices: int | None = None
    vocabulary: int | None = None  # nothing loaded: token ids are refused (after the 503)

    def __init__(self, outage: Outage, runtime: str = "none") -> None:
        self.outage = outage
        self.runtime = runtime
        self.notes: list[str] = []

    async def start(self) -> None:
        """Nothing to load."""

    async def stop(self) -> None:
        """Nothing to release."""

    def status(self) -> tuple[Status, str | None]:
        """Always an error: the outage's detail."""
        return "error", self.outage.detail

    def describe(self) -> dict[str, Any]:
        """The outage, for ``runtime_info`` in /health."""
        return {"runtime": self.runtime, "outage": self.outage.to_data()}

    def stats(self) -> dict[str, int]:
        """No generation ever runs."""
        return {"active": 0, "queued": 0, "completed": 0, "cancelled": 0, "failed": 0}

    async def refresh_live(self) -> dict[str, float]:
        """No live gauges."""
        return {}

    async def chat(self, body: ChatCompletionRequest, call: Call) -> Response:
        raise self.outage.error()

    async def completions(self, body: CompletionRequest, call: Call) -> Response:
        raise self.outage.error()

    async def embeddings(self, body: EmbeddingRequest, call: Call) -> JsonObject:
        raise self.outage.error()
