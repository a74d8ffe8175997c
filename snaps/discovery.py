"""The snap's discovery document: how other programs find its API without being told.

Written by the daemon to ``$SNAP_COMMON/discovery/api.json`` (the layout:
:mod:`snapbuild.serving.discovery`) when it starts listening and again when the engine is ready
or cannot serve, so a consumer (a chat front end, an IDE plugin, another snap through the
``inference-api`` content slot) reads the base URL, model id, engine, capabilities as proven at
start, health URL and version in one place. ``<snap> status --json`` shows the same document.
A consumer asks the health URL for the state of the moment; the document says what was known
when it was written (``updated``).
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from runtimes.declared import Capability
from snapbuild.selection.decision import Decision, Selected
from snapbuild.serving.discovery import (
    SCHEMA_VERSION,
    declared_capabilities,
    document_path,
    socket_path,
)
from snapcommon.files import write_atomically
from snaps.config import Settings
from snaps.manager import Context


def document(
    ctx: Context,
    decision: Decision | None,
    settings: Settings,
    *,
    status: str,
    readiness: dict[str, Any] | None = None,
    outage: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The document for the server as it runs with ``settings`` (``status``: starting, ok,
    error, unavailable, or not started); ``readiness`` is what the gateway reported after its
    start (runtimes.gateway.lifecycle.readiness), ``outage`` why no engine runs at all."""
    from snaps.chat import base_url  # requests: only where a document is written or shown

    selected = decision.selected if decision else None
    url = base_url(settings.host, settings.port)
    engine = None
    if selected is not None:
        engine = {
            "name": selected.engine,
            "runtime": selected.runtime,
            "device": selected.device,
            "quantization": selected.quantization,
        }
    ready = readiness or {}
    gone = outage or ready.get("outage")
    return {
        "schema-version": SCHEMA_VERSION,
        "snap": ctx.env.name,
        "model": ctx.manifest.name,
        "version": ctx.manifest.version,
        "revision": ctx.env.revision,
        "base-url": url,
        "health-url": url.removesuffix("/v1") + "/health",
        "socket": str(socket_path(ctx.env.common)),
        "engine": engine,
        "inputs": list(selected.inputs) if selected else [],
        # a ladder: the model option (size) that serves; the model id stays the snap's name
        "option": selected.option if selected else None,
        "declared": declared(ctx, selected),
        "capabilities": ready.get("capabilities") or {},
        "status": ready.get("status") or status,
        "outage": gone,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def declared(ctx: Context, selected: Selected | None) -> list[Capability]:
    """What the service proves at start for ``selected`` (a ladder: its option's facts)."""
    if selected is None:
        return []
    return list(declared_capabilities(ctx.view(selected.option), selected))


def publish(ctx: Context, data: dict[str, Any]) -> None:
    """Write the document atomically; a snap whose $SNAP_COMMON cannot be written still serves."""
    path = document_path(ctx.env.common)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(data, indent=2) + "\n")


def current(ctx: Context, decision: Decision | None, settings: Settings) -> dict[str, Any]:
    """The published document, or (never published: the server has not started) the one the
    server would publish, marked ``not started``."""
    try:
        data: dict[str, Any] = json.loads(document_path(ctx.env.common).read_text("utf-8"))
    except (OSError, ValueError):
        return document(ctx, decision, settings, status="not started")
    return data
