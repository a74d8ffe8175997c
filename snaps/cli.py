"""The `<snap>` command: the engine manager of an installed inference snap.

Thin click commands over :mod:`snaps.manager`, :mod:`snaps.hooks` and :mod:`snaps.status`;
every command that a program might read has ``--json``. The hidden ``hook`` and ``daemon``
subcommands are what the snap's hook scripts and server app run. Errors print once through
:func:`snapbuild.cli.run_cli`: brief, details, fix, exit code; never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from snapbuild.cli import run_cli
from snapbuild.selection.rows import engine_rows
from snapcommon.errors import UsageError
from snapcommon.sizes import gib as _gib
from snaps import config, hooks
from snaps.console import JSON_OPT, emit, prog, table
from snaps.manager import Context, engine_components, probe_host
from snaps.status import status_data, status_text
from snaps.switch import models, use_engine, use_model


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Manage this inference snap: its engine (and model size), its settings and its local
    API."""


for _command in (models, use_engine, use_model):
    cli.add_command(_command)


# status ------------------------------------------------------------------------------------
@cli.command()
@JSON_OPT
def status(as_json: bool) -> None:
    """Engine, device, service state, endpoint, model id and context size."""
    data = status_data(Context.load())
    if as_json:
        emit(data)
    else:
        click.echo(status_text(data))


# engines -----------------------------------------------------------------------------------
@cli.command()
@JSON_OPT
def engines(as_json: bool) -> None:
    """Every engine with runtime, device, quantization, compatibility, fit, rank; * = active."""
    ctx = Context.load()
    decision = ctx.require_decision()
    option = ctx.active_option(decision)  # a ladder: the engines of the size that runs
    rows = engine_rows(decision, ctx.view(option).engines, option)
    if as_json:
        emit([{**r.to_data(fit="verdict"), "summary": r.summary} for r in rows])
        return
    cells = [("", "ENGINE", "RUNTIME", "DEVICE", "QUANT", "COMPATIBLE", "FIT", "RANK")]
    for r in rows:
        cells.append(
            (
                "*" if r.active else "",
                r.engine,
                r.runtime,
                r.device or "-",
                r.quantization or "-",
                "yes" if r.compatible else "no",
                r.fits,
                str(r.rank) if r.rank is not None else "-",
            )
        )
    table(cells)


@cli.command("show-engine")
@click.argument("name")
@JSON_OPT
def show_engine(name: str, as_json: bool) -> None:
    """One engine: what it needs, the verdicts here, its components."""
    ctx = Context.load()
    decision = ctx.require_decision()
    option = ctx.active_option(decision)  # a ladder: as it runs the size that runs
    served = ctx.view(option)
    engine = served.engine(name)
    if engine is None:
        raise UsageError(
            f"no engine named {name!r} in this snap",
            resolution=f"Engines: {', '.join(e.name for e in served.engines)}.",
        )
    cand = decision.candidate(name, option)
    comps = engine_components(ctx, name, option)
    data: dict[str, Any] = {
        **({"option": option} if option else {}),
        "engine": name,
        "summary": engine.summary,
        "runtime": engine.runtime,
        "artifact": engine.artifact,
        "experimental": engine.experimental,
        "active": bool(cand and decision.winner() == cand),
        "components": {c: ctx.env.component_dir(c).exists() for c in comps},
        "candidate": cand.to_data() if cand else None,
    }
    if as_json:
        emit(data)
        return
    click.echo(f"{name}: {engine.summary}")
    click.echo(f"  runtime:    {engine.runtime}")
    click.echo(f"  artifact:   {engine.artifact}")
    click.echo(f"  active:     {'yes' if data['active'] else 'no'}")
    for comp, present in data["components"].items():
        click.echo(f"  component:  {comp} ({'installed' if present else 'not installed'})")
    if cand:
        click.echo(f"  compatible: {'yes' if cand.compatible else 'no'}")
        for reason in cand.reasons:
            click.echo(f"    - {reason}")


@cli.command()
@JSON_OPT
def why(as_json: bool) -> None:
    """The recorded decision: the winner, every candidate and the reasons."""
    ctx = Context.load()
    decision = ctx.require_decision()
    state = ctx.state()
    if as_json:
        emit({"decision": decision.to_data(), "notes": state.notes, "problem": state.problem})
        return
    if decision.selected:
        size = f"model {decision.selected.option}, " if decision.selected.option else ""
        click.echo(f"selected: {size}{decision.selected.engine}: {decision.selected.why}")
        if decision.selected.serving:
            click.echo(f"serving: {decision.selected.serving.summary()}")
    else:
        click.echo("selected: none")
    for verdict in decision.options:  # a ladder: each size, and why it runs or not
        click.echo(f"model {verdict.option}: {verdict.reason}")
    for cand in decision.candidates:
        rank = f"rank {cand.rank}" if cand.rank else "incompatible"
        name = f"{cand.option}/{cand.engine}" if cand.option else cand.engine
        click.echo(f"{name} ({cand.runtime}, {rank}):")
        for reason in cand.reasons:
            click.echo(f"  - {reason}")
    for note in state.notes:
        click.echo(f"note: {note}")


@cli.command("show-machine")
@JSON_OPT
def show_machine(as_json: bool) -> None:
    """What the prober sees on this machine."""
    ctx = Context.load()
    host, notes, _ = probe_host(ctx)
    if as_json:
        click.echo(host.to_json())
        return
    for cpu in host.cpus:
        click.echo(
            f"cpu:    {cpu.model_name or cpu.vendor or '?'} ({cpu.architecture}, "
            f"{cpu.threads or '?'} threads, {cpu.x86_64_level or '-'})"
        )
    mem = host.memory
    click.echo(f"memory: {_gib(mem.total)} total, {_gib(mem.available)} available")
    for gpu in host.gpus:
        click.echo(f"gpu:    {gpu.vendor} {gpu.name or ''} vram {_gib(gpu.vram)}")
    for npu in host.npus:
        click.echo(f"npu:    {npu.vendor} {npu.name or ''}")
    for warning in host.warnings:
        click.echo(f"warning: {warning.message}")
    for note in notes:
        click.echo(f"note: {note}")


# settings ----------------------------------------------------------------------------------
@cli.command()
@click.argument("keys", nargs=-1)
@JSON_OPT
def get(keys: tuple[str, ...], as_json: bool) -> None:
    """Show settings (all when no KEY is given); values not set show their defaults."""
    ctx = Context.load()
    data = ctx.settings().to_data()
    flat = {k: v for k, v in data.items() if k != "env"}
    flat.update({f"env.{k}": v for k, v in data["env"].items()})
    if keys:
        wanted = [_display_key(config.normalize_key(k)) for k in keys]
        flat = {k: flat.get(k) for k in wanted}
    if as_json:
        emit(flat)
        return
    for key, value in flat.items():
        click.echo(f"{key}={'' if value is None else value}")


def _display_key(key: str) -> str:
    """Show env options as the variable the runtime sees (env.OMP_NUM_THREADS)."""
    return f"env.{config.env_option_to_var(key[4:])}" if key.startswith("env.") else key


@cli.command("set")
@click.argument("assignments", nargs=-1, required=True)
def set_cmd(assignments: tuple[str, ...]) -> None:
    """Set KEY=VALUE settings; all are checked first, and none is applied if one is wrong."""
    ctx = Context.load()
    changes = dict(config.parse_assignment(a) for a in assignments)
    stored = {**ctx.stored(), **changes}
    decision, new_state, settings = hooks.plan(ctx, stored)
    ctx.snapctl.set(changes)
    hooks.apply(ctx, decision, new_state, settings, in_hook=False)
    click.echo(f"Set {', '.join(changes)}.")


@cli.command()
@click.argument("keys", nargs=-1, required=True)
def unset(keys: tuple[str, ...]) -> None:
    """Return settings to their defaults."""
    ctx = Context.load()
    names = [config.normalize_key(k) for k in keys]
    stored = {k: v for k, v in ctx.stored().items() if k not in names}
    decision, new_state, settings = hooks.plan(ctx, stored)
    ctx.snapctl.unset(*names)
    hooks.apply(ctx, decision, new_state, settings, in_hook=False)
    click.echo(f"Unset {', '.join(names)}.")


# chat --------------------------------------------------------------------------------------
@cli.command()
@click.option(
    "--max-tokens", type=click.IntRange(min=1), default=None, help="Limit each answer's length."
)
@click.option(
    "--temperature",
    type=click.FloatRange(0, 2),
    default=None,
    help="Sampling temperature, 0 (always the likeliest word) to 2; default: the model's.",
)
@click.option(
    "--image",
    "images",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Attach a PNG, JPEG or WebP image to the first message (repeatable).",
)
def chat(max_tokens: int | None, temperature: float | None, images: tuple[Path, ...]) -> None:
    """Chat with the model through the local API (one message per line when piped)."""
    from snaps.chat import base_url, run_chat, sampling

    ctx = Context.load()
    settings = ctx.settings()
    url = base_url(settings.host, settings.port)
    options = sampling(max_tokens=max_tokens, temperature=temperature)
    run_chat(url, ctx.manifest.name, options=options, images=images)


# what snapd runs ---------------------------------------------------------------------------
@cli.command(hidden=True)
@click.argument("name", type=click.Choice(sorted(hooks.HOOKS)))
def hook(name: str) -> None:
    """Run a snap hook (the rendered snap/hooks scripts exec this)."""
    hooks.run_hook(name)


@cli.command(hidden=True)
def daemon() -> None:
    """Run the API server for the recorded engine (the snap's server app)."""
    from snaps.daemon import run

    run()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point for `inference-snap` (the snap's `<snap>` command)."""
    sys.exit(run_cli(cli, argv, prog_name=prog()))


if __name__ == "__main__":
    main()
