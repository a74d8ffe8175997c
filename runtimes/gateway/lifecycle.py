"""The engine's start behind an open port: load, prove the declared capabilities, publish.

The port is bound and answering before anything loads (:mod:`runtimes.gateway.server`), so
whatever happens here, clients get an answer: 503 while loading, 503 with the cause and the fix
when the load or the text check fails (:mod:`runtimes.gateway.outage`), 200 once the engine is
loaded, warmed up and its declared capabilities were tried (:mod:`runtimes.gateway.proofs`).

A failed load is retried when the model files change on disk (a re-fetched or replaced file),
so the same port serves the model once it can be loaded, without restarting the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtimes.declared import Capability
from runtimes.gateway.outage import Advice
from runtimes.gateway.proofs import CHECK_TIMEOUT_S, prove
from runtimes.gateway.routes import ServerState
from snapcommon.errors import SnapbuildError

log = logging.getLogger("snapbuild.server")

WATCH_EVERY_S = 2.0
Readiness = dict[str, Any]  # what on_ready hears: :func:`readiness`


@dataclass(frozen=True)
class Startup:
    """How the engine starts: what to prove, what to watch, whom to tell.

    ``declared``: the capabilities the manifest declares for the engine that runs (an empty
    tuple proves nothing: a test serving an engine it drives itself). ``watch``: the model
    files whose change retries a failed load. ``on_ready``: called with :func:`readiness`
    whenever a start attempt ends, ready or not (the snap rewrites its discovery document).
    """

    declared: tuple[Capability, ...] = ()
    check_timeout: float = CHECK_TIMEOUT_S
    watch: tuple[Path, ...] = ()
    advice: Advice = field(default_factory=Advice)
    on_ready: Callable[[Readiness], None] | None = None
    on_load_error: Callable[[BaseException], None] | None = None


def readiness(state: ServerState) -> Readiness:
    """Where the start stands, JSON-ready: status, the capability checks, the outage."""
    outage = state.outage()
    return {
        "status": state.current()[0],
        "capabilities": {name: p.model_dump() for name, p in state.proofs.items()},
        "outage": outage.to_data() if outage else None,
    }


async def start(state: ServerState, startup: Startup) -> None:
    """Load and prove until the engine serves; after a failure, wait for the files to change
    and try again (when there are files to watch)."""
    while True:
        began = time.monotonic()
        if await _attempt(state, startup):
            log.info(
                "%s ready on %s (%s) in %.1f s; capabilities: %s; notes: %s",
                state.model_id,
                state.engine_name,
                state.device,
                time.monotonic() - began,
                _summary(state) or "not checked",
                "; ".join(state.engine.notes) or "none",
            )
            _tell(startup, state)
            return
        _tell(startup, state)
        if not startup.watch:
            return
        await _changed(startup.watch)
        log.warning("the model files changed: loading %s again", state.model_id)
        state.status, state.detail, state.proofs = "loading", None, {}


async def _attempt(state: ServerState, startup: Startup) -> bool:
    """One load and proof; whether the engine now serves (else ``state`` says why)."""
    try:
        await state.engine.start()
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        state.status, state.load_error, state.failure = "error", exc, "load-failed"
        state.detail = exc.brief if isinstance(exc, SnapbuildError) else str(exc)
        why = f"\n{exc.details}" if isinstance(exc, SnapbuildError) and exc.details else ""
        log.error("loading %s failed: %s%s", state.model_id, state.detail, why)
        if startup.on_load_error is not None:
            startup.on_load_error(exc)
        return False
    declared, timeout = startup.declared, startup.check_timeout
    state.proofs = await prove(state.engine, state.model_id, declared, timeout)
    text = state.proofs.get("text")
    if text is not None and not text.passed:
        state.status, state.failure = "error", "check-failed"
        state.detail = f"the engine loaded but could not generate text: {text.detail}"
        log.error("%s: %s", state.model_id, state.detail)
        await state.engine.stop()  # useless as it is: free its memory until the files change
        return False
    for name, proof in state.proofs.items():
        if not proof.passed:
            log.error("%s: the %s check failed: %s", state.model_id, name, proof.detail)
    state.status = "ok"
    return True


def _summary(state: ServerState) -> str:
    return ", ".join(
        f"{name} {'passed' if p.passed else 'FAILED'} ({p.seconds:.2f} s)"
        for name, p in state.proofs.items()
    )


def _tell(startup: Startup, state: ServerState) -> None:
    if startup.on_ready is not None:
        try:
            startup.on_ready(readiness(state))
        except Exception:  # a listener's failure must not stop the server
            log.exception("on_ready failed")


def _fingerprint(paths: Sequence[Path]) -> tuple[tuple[int, int] | None, ...]:
    out: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            stat = path.stat()
            out.append((stat.st_mtime_ns, stat.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


async def _changed(paths: Sequence[Path]) -> None:
    """Return once any of ``paths`` changed (modified, replaced, created or removed)."""
    before = _fingerprint(paths)
    while _fingerprint(paths) == before:
        await asyncio.sleep(WATCH_EVERY_S)
