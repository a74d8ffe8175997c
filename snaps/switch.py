"""Changing what the snap runs: ``use-engine``, and for a snap with model options (a ladder of
sizes) ``models`` and ``use-model``.

Both switches are one procedure over one setting (``engine`` or ``model``): select again (or
check the pinned choice against the selector, refusing what does not fit unless ``--force``),
list the steps (components to install, the other size's weights to remove, the restart), ask,
then pin the setting and make the decision the running state. Components install outside a
hook, so the weights are joined and verified before the server restarts.
"""

from __future__ import annotations

from typing import Literal

import click

from snapbuild.selection.decision import Decision
from snapbuild.selection.ladder import parameters_text
from snapcommon.errors import UsageError
from snapcommon.sizes import memory
from snaps import config, hooks
from snaps.console import JSON_OPT, confirm, emit, prog, table
from snaps.manager import (
    Context,
    State,
    candidate_for,
    missing_components,
    probe_host,
    select,
    stale_components,
)

Setting = Literal["engine", "model"]
Choice = tuple[str | None, str | None]  # (engine, model option)


def _choice(decision: Decision | None) -> Choice:
    sel = decision.selected if decision else None
    return (sel.engine, sel.option) if sel else (None, None)


def _label(choice: Choice) -> str | None:
    """``cuda``, or ``model 4b on cuda`` in a ladder; None when nothing runs."""
    engine, option = choice
    return f"model {option} on {engine}" if option and engine else engine


def _reselect(ctx: Context, key: Setting, stored: dict[str, object]) -> tuple[Decision, State]:
    """``--auto``: the selector chooses again; the other pin (and, for ``use-engine`` in a
    ladder, the size that runs) is kept."""
    stored.pop(key, None)
    host, notes, only_cpu = probe_host(ctx)
    engine = stored.get("engine") if key == "model" else None
    option = (stored.get("model") or ctx.active_option()) if key == "engine" else None
    decision = select(
        ctx.manifest,
        host,
        engine=str(engine) if engine else None,
        option=str(option) if option and option != config.AUTO else None,
        only_cpu=only_cpu,
    )
    settings = ctx.settings(stored, decision)
    problems = config.validate(
        settings, ctx.manifest, candidate_for(decision), own_port=ctx.own_port()
    )
    hooks.reject(problems)
    return decision, State(notes=notes)


def switch(key: Setting, name: str | None, auto: bool, force: bool, assume_yes: bool) -> None:
    """Switch to engine or model ``name``, or re-select with ``auto``; asks before installing
    or restarting, and "no" changes nothing (exit 1)."""
    if bool(name) == auto:
        raise UsageError(
            f"give a {key} name or --auto (not both)",
            resolution=f"e.g. `{prog()} use-{key} --auto`",
        )
    ctx = Context.load()
    if key == "model" and not ctx.manifest.is_ladder:
        raise UsageError(
            f"{ctx.manifest.name} holds one model, with no sizes to choose from",
            resolution=f"Run `{prog()} engines` to see its engines, `use-engine` to switch.",
        )
    active = _choice(ctx.decision())
    stored = ctx.stored()
    if auto:
        decision, state = _reselect(ctx, key, stored)
    else:
        assert name is not None
        stored[key] = name
        decision, new_state, _ = hooks.plan(ctx, stored, force=force)
        state = new_state or ctx.state()
    target = _choice(decision)
    if target == active and not (auto and ctx.stored().get(key)):
        click.echo(f"{_label(active) or 'no engine'} is already active; nothing to do.")
        return
    click.echo("This will:")
    for step in _plan_steps(ctx, active, target, decision):
        click.echo(f"  - {step}")
    if not assume_yes and not confirm():
        click.echo("Nothing changed.")
        raise SystemExit(1)
    if auto:
        ctx.snapctl.unset(key)
    else:
        ctx.snapctl.set({key: name})
    hooks.activate(ctx, decision, state, in_hook=False)
    click.echo(
        f"Now using {_label(target)}."
        if target[0]
        else "No engine fits; the server answers 503 saying why (see `status`)."
    )


def _plan_steps(ctx: Context, active: Choice, target: Choice, decision: Decision) -> list[str]:
    service = ctx.snapctl.service(ctx.env.service)
    engine, option = target
    if engine is None:
        return ["unload the model: no engine fits this machine (the API answers 503 saying why)"]
    sel = decision.selected
    assert sel is not None
    steps = [
        f"switch from {_label(active) or 'no engine'} to {_label(target)} ({sel.runtime} on "
        f"{sel.device})"
    ]
    missing = missing_components(ctx, engine, option)
    if missing:
        steps.append(f"install components: {', '.join(missing)}")
    stale = stale_components(ctx, engine, option)
    if stale:
        steps.append(f"remove the other size's components: {', '.join(stale)}")
    steps.append("restart the server" if service.active else "start the server")
    return steps


@click.command("use-engine")
@click.argument("name", required=False)
@click.option("--auto", is_flag=True, help="Let the selector choose again.")
@click.option("--force", is_flag=True, help="Use an engine the selector rejects.")
@click.option("--assume-yes", "-y", is_flag=True, help="Do not ask (for scripts).")
def use_engine(name: str | None, auto: bool, force: bool, assume_yes: bool) -> None:
    """Switch to engine NAME, or re-select with --auto. Asks before installing or restarting."""
    switch("engine", name, auto, force, assume_yes)


@click.command("use-model")
@click.argument("name", required=False)
@click.option("--auto", is_flag=True, help="Let the selector choose the size again.")
@click.option("--force", is_flag=True, help="Use a model option the selector rejects.")
@click.option("--assume-yes", "-y", is_flag=True, help="Do not ask (for scripts).")
def use_model(name: str | None, auto: bool, force: bool, assume_yes: bool) -> None:
    """Switch to model option NAME (a size, e.g. 4b), or re-select with --auto. Installs only
    that size's components and removes the other's; asks first."""
    switch("model", name, auto, force, assume_yes)


@click.command()
@JSON_OPT
def models(as_json: bool) -> None:
    """Every model option (size) of this snap: parameters, download size, what it reads,
    whether it fits here or why not; * = active."""
    ctx = Context.load()
    if not ctx.manifest.is_ladder:
        raise UsageError(
            f"{ctx.manifest.name} holds one model, with no sizes to choose from",
            resolution=f"Run `{prog()} status` or `{prog()} engines`.",
        )
    decision = ctx.require_decision()
    rows = [
        {**v.to_data(), "active": v.selected and v.option == ctx.active_option(decision)}
        for v in decision.options
    ]
    if as_json:
        emit(rows)
        return
    cells = [("", "MODEL", "PARAMETERS", "SIZE", "READS", "FITS", "ENGINE", "WHY")]
    for v in decision.options:
        cells.append(
            (
                "*" if v.selected else "",
                v.option,
                parameters_text(v.parameters),
                memory(v.size),
                "+".join(v.inputs),
                "yes" if v.fits else "no",
                v.engine or "-",
                v.reason,
            )
        )
    table(cells)
