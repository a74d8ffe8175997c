"""The snap's hooks: install, post-refresh and configure.

snapd performs what a hook asks of it (`snapctl install +component`, `snapctl start`) only after
the hook has ended successfully, so the hooks decide and ask; they never read a component's
files. The daemon waits for the components and prepares the weights when it starts.

The rendered ``snap/hooks/<hook>`` scripts only ``exec "$SNAP/bin/inference-snap" hook <hook>``;
the logic is here, once. The server always runs, but loads a model only when an engine fits:
when nothing does, it answers on its port why (503, :mod:`snaps.fallback`) and ``status`` says
why too, so a machine too small for the model never sees a daemon that loads, runs out of
memory and restarts forever, and its clients never meet a dead port.

A snap built from a model ladder runs one of its model options (sizes): the selector picks it
with the engine, the ``model`` setting pins one, and a refresh keeps the one that ran while it
still fits. Only that option's weights are installed: a switch removes the previous size's.
"""

from __future__ import annotations

import sys

from snapbuild.selection.decision import Decision
from snapcommon.errors import NoEngineError, UsageError
from snaps import artifacts, config
from snaps.manager import (
    Context,
    State,
    candidate_for,
    forced_selection,
    missing_components,
    no_engine_problem,
    probe_host,
    select,
    stale_components,
)


def say(message: str) -> None:
    """Hook output goes to stderr, which snapd shows when a hook fails and logs otherwise."""
    sys.stderr.write(message.rstrip() + "\n")


def activate(
    ctx: Context, decision: Decision, state: State, *, in_hook: bool, restart: bool = True
) -> None:
    """Make ``decision`` the running state: components, record, service.

    From a hook, snapd installs the components (and starts or restarts the service) only after
    the hook has succeeded, so a hook asks for them and never reads them: the daemon waits for
    the components and prepares the weights. Outside hooks (`use-engine`, `set`) `snapctl
    install` blocks, so the weights are joined here, before the restart, and a broken piece is
    reported to the user at once with the old engine still running and still recorded.
    """
    if decision.selected is None:
        state.problem = no_engine_problem(ctx, decision)
        ctx.record(decision, state)
        say(state.problem)
        _run_service(ctx, restart=True)  # it loads nothing: it answers 503 saying why
        return
    engine, option = decision.selected.engine, decision.selected.option
    missing = missing_components(ctx, engine, option)
    if missing and in_hook:
        say(f"requesting components (snapd installs them after this hook): {', '.join(missing)}")
    elif missing:
        say(f"installing components: {', '.join(missing)}")
    ctx.snapctl.install(*missing)
    if not in_hook:  # join shards, gather GGUF splits
        artifacts.ready(ctx.env, ctx.view(option), engine, say)
    stale = stale_components(ctx, engine, option)
    state.problem = None
    ctx.record(decision, state)
    _run_service(ctx, restart=restart)
    if stale:  # another size's weights: a snap holds the one it runs
        say(f"removing the other model sizes' components: {', '.join(stale)}")
        ctx.snapctl.remove(*stale)


def _run_service(ctx: Context, *, restart: bool) -> None:
    """Start (and enable) the server, or restart it when it runs and ``restart`` is asked."""
    service = ctx.env.service
    current = ctx.snapctl.service(service)
    if current.active and restart:
        ctx.snapctl.restart(service)
    if not current.active or not current.enabled:
        ctx.snapctl.start(service, enable=True)


def set_defaults(ctx: Context, decision: Decision) -> None:
    """Store the defaults an operator would want to see with `snap get`, without overriding."""
    stored = ctx.stored()
    defaults: dict[str, object] = {}
    if "host" not in stored:
        defaults["host"] = config.DEFAULT_HOST
    if "port" not in stored:
        host = str(stored.get("host") or config.DEFAULT_HOST)
        port = config.first_free_port(host, ctx.manifest.default_port)
        if port != ctx.manifest.default_port:
            say(f"port {ctx.manifest.default_port} is busy; the server will use {port}")
        defaults["port"] = port
    if "context-size" not in stored and decision.selected:
        defaults["context-size"] = decision.selected.context_size
    ctx.snapctl.set(defaults)


def choose(
    ctx: Context, *, pinned: str | None, model: str | None = None, keep: str | None = None
) -> tuple[Decision, State]:
    """Probe and select, honouring a pinned engine and (a ladder) a pinned model option while
    they are still compatible; ``keep``: the option that ran before, which a refresh keeps while
    it fits. What no longer fits is noted and the selector chooses again."""
    host, notes, only_cpu = probe_host(ctx)
    state = State(notes=notes)
    engine = pinned if pinned and pinned != config.AUTO else None
    chosen = model if model and model != config.AUTO else None
    option = chosen or keep
    attempts: list[tuple[str | None, str | None]] = [(engine, option)] if engine else []
    attempts += [(None, option)] if option else []
    for want_engine, want_option in attempts:
        decision = select(
            ctx.manifest, host, engine=want_engine, option=want_option, only_cpu=only_cpu
        )
        if decision.selected is not None:
            return decision, state
        if want_engine or chosen:  # a pin the operator set (post-refresh explains a kept size)
            what = f"engine {want_engine!r}" if want_engine else f"model {want_option!r}"
            state.notes.append(
                f"the chosen {what} no longer fits this machine; selected automatically"
            )
    return select(ctx.manifest, host, only_cpu=only_cpu), state


def _settings_of(ctx: Context) -> tuple[str | None, str | None]:
    """The stored engine and model pins (None when not set)."""
    stored = ctx.stored()
    engine, model = stored.get("engine"), stored.get("model")
    return (str(engine) if engine else None), (str(model) if model else None)


def _named(decision: Decision) -> str:
    """The selected engine, and the model option it runs (a ladder), for a hook's log."""
    sel = decision.selected
    assert sel is not None
    return f"model {sel.option}, engine {sel.engine}" if sel.option else f"engine {sel.engine}"


def install(ctx: Context) -> None:
    """Probe, select, record, install components, set defaults, start the server (which
    answers 503 saying why when nothing fits)."""
    # an `engine` or `model` preset (gadget defaults, or `snapbuild try --engine`) is honoured
    # when it fits
    pinned, model = _settings_of(ctx)
    decision, state = choose(ctx, pinned=pinned, model=model)
    for note in state.notes:
        say(note)
    if decision.selected is not None:
        say(f"selected {_named(decision)}: {decision.selected.why}")
        set_defaults(ctx, decision)
    activate(ctx, decision, state, in_hook=True)


def post_refresh(ctx: Context) -> None:
    """Re-validate the choice against the current machine and the new revision's manifest.

    The engine (and a ladder's model option) is kept, and the server left alone, while it is
    still in the snap and fits; otherwise the selector chooses again and the hook says why the
    old one went.
    """
    before = ctx.decision()
    previous = before.selected.engine if before and before.selected else None
    was = ctx.active_option(before) if before else None
    settings = ctx.settings()
    keep = was if was and ctx.manifest.option(was) else None
    decision, state = choose(ctx, pinned=settings.engine, model=settings.model, keep=keep)
    sel = decision.selected
    if settings.engine != config.AUTO and (sel is None or sel.engine != settings.engine):
        ctx.snapctl.unset("engine")
    if settings.model not in (None, config.AUTO) and (sel is None or sel.option != settings.model):
        ctx.snapctl.unset("model")
    current = sel.engine if sel else None
    now = sel.option if sel else None
    changed = (current, now) != (previous, was)
    if previous and changed:
        state.notes.append(_why_changed(ctx, decision, (previous, was), (current, now)))
    for note in state.notes:
        say(note)
    if sel is not None:
        set_defaults(ctx, decision)
    activate(ctx, decision, state, in_hook=True, restart=changed)


def _why_changed(
    ctx: Context,
    decision: Decision,
    before: tuple[str, str | None],
    after: tuple[str | None, str | None],
) -> str:
    """One sentence: why the engine (or model option) that ran before the refresh does not
    run now."""
    previous, was = before
    current, now = after
    if was is not None and was != now:
        verdict = decision.option_verdict(was)
        if verdict is None:
            reason = f"model {was} is no longer in this snap"
        else:
            reason = f"model {was} no longer fits this machine ({verdict.reason})"
        then = f"switched to model {now}, engine {current}" if current else "no model fits"
        return f"after the refresh {reason}: {then}"
    if ctx.manifest.engine(previous) is None:
        reason = f"engine {previous} is no longer in this snap"
    else:
        cand = decision.candidate(previous, was)
        blockers = "; ".join(cand.blockers) if cand and cand.blockers else "it ranks lower now"
        reason = f"engine {previous} no longer fits this machine ({blockers})"
    then = f"switched to {current}" if current else "no other engine fits"
    return f"after the refresh {reason}: {then}"


def plan(
    ctx: Context, stored: dict[str, object], *, force: bool = False
) -> tuple[Decision, State | None, config.Settings]:
    """Validate a whole configuration: (decision to run, new state if the engine or model
    changes, settings).

    Raises with every reason when anything is wrong, before anything is written.
    """
    decision = ctx.require_decision()
    settings = ctx.settings(dict(stored), decision)
    new_state: State | None = None
    sel = decision.selected
    engine = settings.engine if settings.engine != config.AUTO else None
    model = settings.model if settings.model not in (None, config.AUTO) else None
    active_option = ctx.active_option(decision)
    if (engine and engine != (sel.engine if sel else None)) or (model and model != active_option):
        if (engine and ctx.manifest.engine(engine) is None) or (
            model and ctx.manifest.option(model) is None
        ):
            reject(config.validate(settings, ctx.manifest, None))
        decision, new_state = _switch(ctx, engine, model or active_option, force=force)
        settings = ctx.settings(dict(stored), decision)
    candidate = None if (new_state and new_state.forced) else candidate_for(decision)
    reject(config.validate(settings, ctx.manifest, candidate, own_port=ctx.own_port()))
    return decision, new_state, settings


def _switch(
    ctx: Context, engine: str | None, option: str | None, *, force: bool
) -> tuple[Decision, State]:
    """Select ``engine`` and/or ladder ``option`` here, or force it past the selector's
    verdict (``force``); a refusal names every blocker."""
    host, notes, only_cpu = probe_host(ctx)
    decision = select(ctx.manifest, host, engine=engine, option=option, only_cpu=only_cpu)
    state = State(notes=notes)
    sel = decision.selected
    if sel is not None and (engine or sel.engine) == sel.engine and sel.option == option:
        return decision, state
    mine = [c for c in decision.candidates if c.option == option]
    cand = next((c for c in mine if engine is None or c.engine == engine), None)
    what = f"engine {engine!r}" if engine else f"model {option!r}"
    if not force or cand is None:
        verdict = decision.option_verdict(option) if option and not engine else None
        noun, name = ("engine", engine) if engine else ("model", option)
        raise NoEngineError(
            f"{what} cannot run here",
            details=verdict.reason if verdict else ("; ".join(cand.blockers) if cand else None),
            resolution=f"Use `{ctx.env.name} use-{noun} {name} --force` to insist, or leave the "
            f"{noun} unset for automatic selection.",
        )
    state.forced = True
    return forced_selection(decision, cand.engine, ctx.manifest, option), state


def apply(
    ctx: Context,
    decision: Decision,
    new_state: State | None,
    settings: config.Settings,
    *,
    in_hook: bool,
) -> None:
    """Put a validated plan in place: switch engine (which restarts), or restart if changed."""
    if new_state is not None:
        activate(ctx, decision, new_state, in_hook=in_hook)
    else:
        restart_if_changed(ctx, settings)


def configure(ctx: Context) -> None:
    """Validate the whole configuration; apply it (switch engine, restart) only when valid.

    A non-zero exit makes snapd undo the `snap set`, so nothing is half-applied.
    """
    if ctx.decision() is None:
        return  # snapd may run configure before install has chosen; nothing to apply yet
    apply(ctx, *plan(ctx, ctx.stored()), in_hook=True)


def reject(problems: list[str]) -> None:
    if problems:
        raise UsageError(
            "invalid configuration: " + problems[0],
            details="\n".join(problems[1:]) or None,
            resolution="Change the value(s) named above; nothing was applied.",
        )


def restart_if_changed(ctx: Context, settings: config.Settings) -> bool:
    """Restart the server when it runs with other settings (or start it if it died); True if so."""
    if ctx.decision() is None:
        return False  # (with no engine that fits, the server still runs: it answers 503)
    running = ctx.running()
    service = ctx.snapctl.service(ctx.env.service)
    if service.active and running is not None and running != settings.to_data():
        ctx.snapctl.restart(ctx.env.service)
        return True
    if service.enabled and not service.active:
        ctx.snapctl.start(ctx.env.service)
        return True
    return False


HOOKS = {"install": install, "post-refresh": post_refresh, "configure": configure}


def run_hook(name: str) -> None:
    """Entry point of `inference-snap hook NAME`."""
    if name not in HOOKS:
        raise UsageError(f"unknown hook {name!r}", resolution=f"Hooks: {', '.join(HOOKS)}.")
    HOOKS[name](Context.load())
