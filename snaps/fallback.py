"""When the snap's engine cannot serve, its port still answers: why, and what to do.

Before this, the daemon exited when nothing fit, when the weights failed to load, or when its
components never came, and clients met a dead port; only ``<snap> status`` explained, to someone
at a shell. Now the daemon turns each such failure into an :class:`~runtimes.gateway.outage.
Outage` (reason, detail, what to do in this snap's commands) and serves it on the configured
port and Unix socket (:func:`serve_outage`): ``/health`` 503 with the reason, every ``/v1``
route an OpenAI-shaped 503. When the operator fixes the cause (``use-engine``, ``set``,
``snap refresh``), the hooks restart the service and the same port serves the model.

Failures the gateway meets after the port is open (a load or text check that fails, a child
restarting or past its restart limit) are answered by the gateway itself, in the words of
:func:`advice`.
"""

from __future__ import annotations

import json
import sys

from runtimes.engine import RuntimeFailure
from runtimes.gateway.outage import Advice, Outage, Reason
from snapbuild.selection.decision import Decision
from snapbuild.serving.discovery import socket_path
from snapcommon.errors import EXIT_NO_ENGINE, SnapbuildError
from snaps import discovery
from snaps.artifacts import ArtifactError
from snaps.manager import Context, engine_blockers
from snaps.verify import CorruptArtifact


class Unservable(SnapbuildError):
    """Nothing can serve until someone acts; the daemon answers on its port why."""

    reason: Reason = "failed"


class NothingFits(Unservable):
    """No engine of the snap fits this machine (or the recorded one no longer does)."""

    reason: Reason = "no-fit"
    exit_code = EXIT_NO_ENGINE


class EngineDisabled(Unservable):
    """The operator switched the engine off (``engine-enabled=false``)."""

    reason: Reason = "disabled"


def disabled(ctx: Context) -> EngineDisabled:
    """The outage of an engine the operator switched off."""
    name = ctx.env.name
    return EngineDisabled(
        "the engine is disabled by the operator (engine-enabled=false)",
        resolution=f"Run `{name} set engine-enabled=true` (or `sudo snap set {name} "
        "engine-enabled=true`) to load the model again.",
    )


def nothing_fits(ctx: Context, decision: Decision) -> NothingFits:
    """The outage of a machine where no engine fits: each engine's blockers (a ladder: its
    smallest size's, which stop every larger one too), and the fix."""
    name = ctx.env.name
    blockers = " | ".join(engine_blockers(decision))
    if decision.options:
        blockers = f"not even the smallest model, {decision.options[-1].option}: {blockers}"
    return NothingFits(
        f"no engine of {ctx.manifest.name} fits this machine ({blockers})",
        resolution=f"Run `{name} why` for every reason; after freeing memory or installing the "
        f"driver it names, run `{name} use-engine --auto`.",
    )


def advice(ctx: Context, engine: str) -> Advice:
    """What to do, in this snap's commands, for the outages the gateway finds by itself."""
    name = ctx.env.name
    return Advice(
        load_failed=f"The files of engine {engine} pass their checksums but do not load: run "
        f"`{name} use-engine --auto` or another engine (`{name} engines`), or "
        f"`sudo snap refresh {name}` for repaired weights; `snap logs {name}.server` says more.",
        restarting=f"Retry in a few seconds: the engine restarts by itself (`{name} status`).",
        restart_limit=f"Read why it keeps exiting in `snap logs {name}.server`, then run "
        f"`sudo snap restart {name}.server`.",
    )


def outage_of(ctx: Context, err: SnapbuildError) -> Outage:
    """The outage a start-up failure means: its reason, the error's brief and its fix."""
    reason: Reason = "failed"
    if isinstance(err, Unservable):
        reason = err.reason
    elif isinstance(err, RuntimeFailure | ArtifactError | CorruptArtifact):
        reason = "load-failed"
    detail = err.brief + (f" ({err.details.strip()})" if err.details else "")
    fix = err.resolution or f"Run `{ctx.env.name} status` for what happened."
    return Outage(reason, detail, fix)


def serve_outage(ctx: Context, outage: Outage) -> None:
    """Answer on the configured port and socket with ``outage`` until the service is stopped."""
    from runtimes.gateway.server import FallbackOptions, run_unavailable

    decision = ctx.decision()
    settings = ctx.settings(decision=decision)
    # what it runs with, so that `set` restarts it when a setting changes (restart_if_changed)
    ctx.env.running_path.write_text(json.dumps(settings.to_data(), indent=2) + "\n")
    selected = decision.selected if decision else None
    options = FallbackOptions(
        model_id=ctx.manifest.name,
        outage=outage,
        engine_name=selected.engine if selected else "none",
        host=settings.host,
        port=settings.port,
        unix_socket=socket_path(ctx.env.common),
        cors_origins=tuple(settings.origins()) or None,
    )

    def listening(host: str, port: int) -> None:
        sys.stderr.write(
            f"answering 503 ({outage.reason}) on http://{host}:{port}/v1 until the cause is "
            f"fixed: {outage.resolution}\n"
        )
        sys.stderr.flush()
        data = discovery.document(
            ctx, decision, settings, status="unavailable", outage=outage.to_data()
        )
        discovery.publish(ctx, data)

    run_unavailable(options, on_listening=listening)
