"""The snap's hooks: install, post-refresh and configure.

snapd performs what a hook asks of it (`snapctl install +component`, `snapctl start`) only after
the hook has ended successfully, so the hooks decide and ask; they never read a component's
files. The daemon waits for the components and prepares the weights when it starts.

The rendered ``snap/hooks/<hook>`` scripts only ``exec "$SNAP/bin/inference-snap" hook <hook>``;
the logic is here, once. The server starts only when an engine fits: when nothing does the
service stays disabled and ``status`` says why, so a machine too small for the model never sees
a daemon that loads, runs out of memory and restarts forever.
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
    service = ctx.env.service
    if decision.selected is None:
        state.problem = no_engine_problem(ctx, decision)
        ctx.record(decision, state)
        ctx.snapctl.stop(service, disable=True)
        say(state.problem)
        return
    engine = decision.selected.engine
    missing = missing_components(ctx, engine)
    if missing and in_hook:
        say(f"requesting components (snapd installs them after this hook): {', '.join(missing)}")
    elif missing:
        say(f"installing components: {', '.join(missing)}")
    ctx.snapctl.install(*missing)
    if not in_hook:
        artifacts.ready(ctx.env, ctx.manifest, engine, say)  # join shards, gather GGUF splits
    state.problem = None
    ctx.record(decision, state)
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


def choose(ctx: Context, *, pinned: str | None) -> tuple[Decision, State]:
    """Probe and select, honouring a pinned engine while it is still compatible."""
    host, notes, only_cpu = probe_host(ctx)
    state = State(notes=notes)
    if pinned and pinned != config.AUTO:
        decision = select(ctx.manifest, host, engine=pinned, only_cpu=only_cpu)
        if decision.selected is not None and decision.selected.engine == pinned:
            return decision, state
        state.notes.append(
            f"the chosen engine {pinned!r} no longer fits this machine; selected automatically"
        )
    return select(ctx.manifest, host, only_cpu=only_cpu), state


def install(ctx: Context) -> None:
    """Probe, select, record, install components, set defaults, start only if something fits."""
    # an `engine` preset (gadget defaults, or `snapbuild try --engine`) is honoured when it fits
    pinned = ctx.stored().get("engine")
    decision, state = choose(ctx, pinned=str(pinned) if pinned else None)
    for note in state.notes:
        say(note)
    if decision.selected is not None:
        say(f"selected engine {decision.selected.engine}: {decision.selected.why}")
        set_defaults(ctx, decision)
    activate(ctx, decision, state, in_hook=True)


def post_refresh(ctx: Context) -> None:
    """Re-validate the choice against the current machine and the new revision's manifest.

    The engine is kept (and the server left alone) while it is still in the snap and fits;
    otherwise the selector chooses again and the hook says why the old engine went.
    """
    before = ctx.decision()
    previous = before.selected.engine if before and before.selected else None
    pinned = ctx.settings().engine
    decision, state = choose(ctx, pinned=pinned)
    if pinned != config.AUTO and (decision.selected is None or decision.selected.engine != pinned):
        ctx.snapctl.unset("engine")
    current = decision.selected.engine if decision.selected else None
    if previous and current != previous:
        state.notes.append(_why_changed(ctx, decision, previous, current))
    for note in state.notes:
        say(note)
    if decision.selected is not None:
        set_defaults(ctx, decision)
    activate(ctx, decision, state, in_hook=True, restart=current != previous)


def _why_changed(ctx: Context, decision: Decision, previous: str, current: str | None) -> str:
    """One sentence: why the engine that ran before the refresh does not run now."""
    if ctx.manifest.engine(previous) is None:
        reason = f"engine {previous} is no longer in this snap"
    else:
        cand = decision.candidate(previous)
        blockers = "; ".join(cand.blockers) if cand and cand.blockers else "it ranks lower now"
        reason = f"engine {previous} no longer fits this machine ({blockers})"
    then = f"switched to {current}" if current else "no other engine fits"
    return f"after the refresh {reason}: {then}"


def plan(
    ctx: Context, stored: dict[str, object], *, force: bool = False
) -> tuple[Decision, State | None, config.Settings]:
    """Validate a whole configuration: (decision to run, new state if the engine changes, settings).

    Raises with every reason when anything is wrong, before anything is written.
    """
    decision = ctx.require_decision()
    settings = ctx.settings(dict(stored), decision)
    new_state: State | None = None
    active = decision.selected.engine if decision.selected else None
    if settings.engine != config.AUTO and settings.engine != active:
        if ctx.manifest.engine(settings.engine) is None:
            reject(config.validate(settings, ctx.manifest, None))
        host, notes, only_cpu = probe_host(ctx)
        decision = select(ctx.manifest, host, engine=settings.engine, only_cpu=only_cpu)
        new_state = State(notes=notes)
        if decision.selected is None or decision.selected.engine != settings.engine:
            cand = decision.candidate(settings.engine)
            if not force:
                raise NoEngineError(
                    f"engine {settings.engine!r} cannot run here",
                    details="; ".join(cand.blockers) if cand else None,
                    resolution=f"Use `{ctx.env.name} use-engine {settings.engine} --force` to "
                    "insist, or leave the engine unset for automatic selection.",
                )
            decision = forced_selection(decision, settings.engine, ctx.manifest)
            new_state.forced = True
        settings = ctx.settings(dict(stored), decision)
    candidate = None if (new_state and new_state.forced) else candidate_for(decision)
    reject(config.validate(settings, ctx.manifest, candidate, own_port=ctx.own_port()))
    return decision, new_state, settings


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
    if ctx.decision() is None or ctx.require_decision().selected is None:
        return False
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
