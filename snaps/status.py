"""What `<snap> status` reports: the engine, the service, the endpoint and what is wrong.

Gathered as data first (``status --json`` is a contract programs read, and `snapbuild try`
reads it through the snap's command), then written as text from that same data, so the two
forms never disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from snapbuild.selection.decision import Decision, Serving
from snapbuild.serving.discovery import document_path
from snaps import discovery
from snaps.live import live_lines, live_status
from snaps.manager import Context


def status_data(ctx: Context) -> dict[str, Any]:
    """What `status` shows, as data."""
    decision = ctx.decision()
    state = ctx.state()
    settings = ctx.settings(decision=decision)
    service = ctx.snapctl.service(ctx.env.service)
    selected = decision.selected if decision else None
    from snaps.chat import base_url  # requests, only when status runs (not in every hook)

    return {
        "snap": ctx.env.name,
        "model": ctx.manifest.name,
        **_option(ctx, decision),
        "engine": selected.engine if selected else None,
        "runtime": selected.runtime if selected else None,
        "device": selected.device if selected else None,
        "quantization": selected.quantization if selected else None,
        "inputs": list(selected.inputs) if selected else None,
        "forced": state.forced,
        "service": {
            "name": ctx.env.service,
            "enabled": service.enabled,
            "active": service.active,
        },
        "endpoint": base_url(settings.host, settings.port),
        "context-size": settings.context_size,
        "serving": _serving(ctx, decision, settings.context_size),
        "live": live_status(settings.host, settings.port) if service.active else None,
        "daemon": daemon_note(ctx, service.active),
        "problem": _problem(ctx, decision, state.problem, settings.engine_enabled == "false"),
        "notes": state.notes,
        # the same document the daemon publishes for other programs (snaps.discovery)
        "discovery": discovery.current(ctx, decision, settings),
        "discovery-file": str(document_path(ctx.env.common)),
    }


def _problem(
    ctx: Context, decision: Decision | None, recorded: str | None, off: bool
) -> str | None:
    """Why no model is served, and what to do: none chosen yet, the operator switched the
    engine off, or what the hooks recorded (nothing fits)."""
    name = ctx.env.name
    if decision is None:
        return f"no engine chosen yet: run `{name} use-engine --auto`"
    if off:
        return (
            "The engine is disabled by the operator (engine-enabled=false): the API answers 503 "
            f"saying so. Run `{name} set engine-enabled=true` to load the model again."
        )
    return recorded


def _option(ctx: Context, decision: Decision | None) -> dict[str, Any]:
    """A ladder: the model option (size) that runs and what it reads; nothing for one model
    (its status reads as it always did)."""
    if not ctx.manifest.is_ladder:
        return {}
    name = ctx.active_option(decision)
    verdict = decision.option_verdict(name) if decision and name else None
    if verdict is None:
        return {"option": None}
    return {
        "option": {
            "name": verdict.option,
            "title": verdict.title,
            "parameters": verdict.parameters,
            "reads": list(verdict.inputs),
        }
    }


def _serving(ctx: Context, decision: Decision | None, context: int) -> dict[str, Any] | None:
    """The serving plan at the context the server runs with (the operator's setting, when it
    differs from the selector's: the slots are planned again for it, as the daemon does)."""
    selected = decision.selected if decision else None
    if decision is None or selected is None:
        return None
    from snapbuild.serving.plan import serving_plan  # not launch: status needs no FastAPI

    winner = decision.winner()
    served = ctx.view(selected.option)  # a ladder: the option that runs, as a single model
    plan = serving_plan(served, selected, context, winner.memory if winner else None)
    return plan.to_data() if plan else None


def daemon_note(ctx: Context, active: bool) -> dict[str, str] | None:
    """What the server is busy with (waiting for components, preparing, loading) or why it
    failed; None while it serves or when it is simply stopped."""
    data = _newest_note(ctx.env.daemon_status_paths)
    if data is None:
        return None
    phase = str(data.get("phase"))
    if phase == "serving" or not (active or phase == "failed"):
        return None
    return {"phase": phase, "message": str(data.get("message"))}


def capability_lines(document: dict[str, Any], path: str) -> list[str]:
    """The capabilities checked at start (each one's verdict) and where the API is published."""
    checked = document.get("capabilities") or {}
    verdicts = [
        f"{name} passed" if p.get("passed") else f"{name} FAILED ({p.get('detail')})"
        for name, p in checked.items()
    ]
    lines = [f"capabilities: {', '.join(verdicts)}"] if verdicts else []
    return [*lines, f"discovery:    {path} (Unix socket {document.get('socket')})"]


def _newest_note(paths: tuple[Path, ...]) -> dict[str, Any] | None:
    """The daemon's latest note: it writes $SNAP_DATA's, or $SNAP_COMMON's when it cannot."""
    found: list[tuple[int, dict[str, Any]]] = []
    for path in paths:
        try:
            found.append((path.stat().st_mtime_ns, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    notes = [(when, data) for when, data in found if isinstance(data, dict)]
    return max(notes, key=lambda pair: pair[0])[1] if notes else None


def status_text(data: dict[str, Any]) -> str:
    service = data["service"]
    state = ("active" if service["active"] else "inactive") + (
        ", enabled" if service["enabled"] else ", disabled"
    )
    engine = data["engine"] or "none"
    if data["engine"]:
        engine += f" ({data['runtime']} on {data['device']}, {data['quantization']})"
        if data["forced"]:
            engine += " [forced]"
    option: dict[str, Any] = data.get("option") or {}
    size = (
        f" ({option['title'] or option['name']}, reads {'+'.join(option['reads'])})"
        if option
        else ""
    )
    lines = [
        f"model:        {data['model']}{size}",
        f"engine:       {engine}",
        f"service:      {service['name']} ({state})",
        f"endpoint:     {data['endpoint']}",
        f"context-size: {data['context-size']}",
    ]
    if data["inputs"]:
        lines.insert(2, f"inputs:       {', '.join(data['inputs'])}")
    if data["serving"]:
        lines.append(f"serving:      {Serving.model_validate(data['serving']).summary()}")
    if service["active"]:
        lines.extend(live_lines(data["live"]))
    lines.extend(capability_lines(data["discovery"], data["discovery-file"]))
    if data["daemon"]:
        lines.insert(3, f"server:       {data['daemon']['phase']}: {data['daemon']['message']}")
    if data["engine"] and service["enabled"] and not service["active"]:
        lines.append(
            "The service is enabled but not running: stopped, still starting, or failed "
            "(see the service log)."
        )
    if data["problem"]:
        lines.append("")
        lines.extend(data["problem"].splitlines())
    for note in data["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
