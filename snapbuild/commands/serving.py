"""``snapbuild serve`` and ``snapbuild fetch``: thin commands over the server and the cache."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import NoReturn

import click

from hwprobe.profile import HostProfile
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import MemoryEstimate, Selected
from snapbuild.serving.threads import default_threads as _threads
from snapcommon.errors import NoEngineError, UsageError


def _port(value: str) -> int | str:
    if value == "auto":
        return value
    if value.isdigit() and 0 < int(value) < 65536:
        return int(value)
    raise UsageError(
        f"--port {value!r} is not a port",
        resolution="give a number from 1 to 65535, or 'auto' for the next free port",
    )


OPTION = click.option(
    "--option",
    "option",
    default=None,
    help="A model ladder: this model option (size) instead of the selector's.",
)


def _choose_engine(
    manifest: Manifest,
    host: HostProfile,
    engine: str | None,
    option: str | None = None,
    force: bool = False,
) -> tuple[Manifest, Selected, MemoryEstimate | None]:
    """The selector's choice (or ``engine`` and ``option``, when compatible, or whatever the
    selector says of them with ``force``): the manifest that serves (a ladder's option view),
    the engine, the context it chose, its serving configuration and batching plan, the inputs
    it serves; and its memory estimate (for planning the slots again at an operator's
    context)."""
    from snapbuild.manifest.ladder import view_for
    from snapbuild.selection.forced import forced
    from snapbuild.selection.selector import select

    if force and engine is None:
        raise UsageError("--force needs --engine", resolution="e.g. --engine vulkan --force")
    if engine is not None and manifest.engine(engine) is None:
        raise UsageError(
            f"the manifest {manifest.name!r} has no engine {engine!r}",
            resolution="use one of: " + ", ".join(e.name for e in manifest.engines),
        )
    decision = select(manifest, host, engine=engine, option=option)
    if force and engine and (decision.selected is None or decision.selected.engine != engine):
        chosen = option
        if chosen is None and decision.options:  # a ladder: the size the selector runs here
            auto = select(manifest, host).selected
            chosen = auto.option if auto else decision.options[-1].option  # else the smallest
        how = "`snapbuild serve --force`"
        decision = forced(decision, engine, manifest, option=chosen, how=how)
    if decision.selected is None:
        blockers = [
            f"{c.engine}: {'; '.join(c.blockers) or 'not compatible'}"
            for c in decision.no_fit_candidates()
        ]
        raise NoEngineError(
            f"no engine of {manifest.name} fits this machine",
            details="\n".join(blockers),
            resolution=f"see `snapbuild why-not {manifest.name}`, or force one with --engine",
        )
    candidate = decision.winner()
    view = view_for(manifest, decision.selected.option)
    return view, decision.selected, candidate.memory if candidate else None


@click.command("serve")
@click.argument("model")
@click.option("--engine", "engine", default=None, help="Serve this engine instead of selecting.")
@OPTION
@click.option(
    "--force",
    is_flag=True,
    help="Serve --engine even where the selector rejects it (e.g. Vulkan on lavapipe).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    "port_text",
    default=None,
    help="Port, or 'auto' for the next free one (default: the manifest's default port).",
)
@click.option(
    "--unix-socket",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also serve the API on this Unix socket (as the snap does in $SNAP_COMMON).",
)
@click.option("--context-size", type=click.IntRange(min=16), default=None, help="Context tokens.")
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=512),  # ggml's GGML_MAX_N_THREADS
    default=None,
    help="CPU threads.",
)
@click.option(
    "--slots",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Requests served together: llama.cpp's slots, or the sequences an OpenVINO or ONNX "
    "Runtime engine batches, 1 for one at a time (default: the selector's plan).",
)
@click.option(
    "--llama-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="llama.cpp component tree with usr/bin/llama-server (default: $SNAPBUILD_LLAMA_ROOT).",
)
def serve_cmd(
    model: str,
    engine: str | None,
    option: str | None,
    force: bool,
    host: str,
    port_text: str | None,
    unix_socket: Path | None,
    context_size: int | None,
    threads: int | None,
    slots: int | None,
    llama_root: Path | None,
) -> None:
    """Serve MODEL's OpenAI-compatible API on this machine (selecting the engine)."""
    import hwprobe
    from runtimes.gateway.server import run
    from snapbuild.fetch.artifacts import locate
    from snapbuild.manifest.checks import require_safe_template
    from snapbuild.manifest.loader import load_manifest
    from snapbuild.serving.launch import serve_options

    manifest = load_manifest(model)
    port = _port(port_text) if port_text else None
    profile = hwprobe.probe()
    try:
        manifest, selected, memory = _choose_engine(manifest, profile, engine, option, force)
    except NoEngineError as err:  # the port answers why, as the snap's does
        serve_no_fit(manifest, err, host, port, unix_socket)
    chosen = manifest.engine(selected.engine)
    assert chosen is not None
    found: list[Path] = []
    wanted = manifest.engine_artifacts(chosen)  # the weights, then any projector
    if "vision" not in selected.inputs:  # its image encoder does not fit here
        wanted = wanted[:1]
    for artifact in wanted:
        path = locate(manifest, artifact)
        if path is None:
            raise UsageError(
                f"the {artifact.name} artifact of {manifest.name} is not on this machine",
                resolution=f"download it with: snapbuild fetch {model} --engine {chosen.name}",
            )
        found.append(path)
    require_safe_template(found[0], manifest.model.chat_template)

    def listening(bound_host: str, bound_port: int) -> None:
        click.echo(
            f"Serving {manifest.name} with engine {chosen.name} ({chosen.runtime}) on "
            f"http://{bound_host}:{bound_port}/v1 (health: /health)",
            err=True,
        )

    options = serve_options(
        manifest,
        selected,
        artifact=found[0],
        projector=found[1] if len(found) > 1 else None,
        context_size=context_size,
        threads=threads or _threads(profile),
        slots=slots,
        host=host,
        port=port,
        llama_root=llama_root,
        memory=memory,
        machine=profile,
        unix_socket=unix_socket,
    )
    run(options, on_listening=listening)


def serve_no_fit(
    manifest: Manifest,
    err: NoEngineError,
    host: str,
    port: int | str | None,
    unix_socket: Path | None = None,
) -> NoReturn:
    """Say why nothing fits, then answer 503 on the port saying the same until interrupted;
    exit 3 after, so a script still learns it."""
    from runtimes.gateway.outage import Outage
    from runtimes.gateway.server import FallbackOptions, run_unavailable

    err.report()
    detail = err.brief + (f" ({' | '.join(err.details.splitlines())})" if err.details else "")
    outage = Outage("no-fit", detail, (err.resolution or "").capitalize())
    where = manifest.default_port if port is None else port
    where = str(manifest.default_port) if where == "auto" else where  # the first free from it
    options = FallbackOptions(
        model_id=manifest.name, outage=outage, host=host, port=where, unix_socket=unix_socket
    )

    def listening(bound_host: str, bound_port: int) -> None:
        click.echo(
            f"Answering 503 (no engine fits) on http://{bound_host}:{bound_port}/v1 until "
            "interrupted",
            err=True,
        )

    run_unavailable(options, on_listening=listening)
    raise SystemExit(err.exit_code)


@click.command("fetch")
@click.argument("model")
@click.option("--engine", "engine", default=None, help="Fetch this engine's artifact.")
@OPTION
@click.option(
    "--record",
    is_flag=True,
    help="Trust on first use: download placeholder files and write their size and sha256 "
    "into the manifest file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print where the files are, as JSON.")
def fetch_cmd(
    model: str, engine: str | None, option: str | None, record: bool, as_json: bool
) -> None:
    """Download MODEL's artifact for an engine into the cache (resumable, verified); for a model
    ladder, of the option the selector picks here (or --option)."""
    from snapbuild.fetch.artifacts import engine_artifact, fetch, tqdm_progress
    from snapbuild.fetch.record import fetch_recording
    from snapbuild.manifest.ladder import view_for
    from snapbuild.manifest.loader import load_manifest, resolve

    manifest = load_manifest(model)
    if manifest.is_ladder and option is not None:
        manifest = view_for(manifest, option)
    elif manifest.is_ladder:  # the option this machine would run
        manifest = _choose_engine(manifest, _probe(), engine)[0]
    if engine is None and len({e.artifact for e in manifest.engines}) > 1:
        engine = _choose_engine(manifest, _probe(), None)[1].engine
    artifact = engine_artifact(manifest, engine)
    progress = None if as_json else tqdm_progress
    command = (
        f"snapbuild fetch {shlex.quote(model)}"
        + (f" --engine {shlex.quote(engine)}" if engine else "")
        + (f" --option {shlex.quote(manifest.view_of)}" if manifest.view_of else "")
    )
    chosen = manifest.engine(engine) if engine else None
    projector = manifest.artifact(chosen.projector) if chosen and chosen.projector else None
    data: dict[str, object] = {"artifact": artifact.name}
    if projector is not None:
        data["projector"] = projector.name
    if record:
        outcome = fetch_recording(resolve(model), artifact.name, progress=progress)
        results = outcome.results
        recorded = list(outcome.recorded)
        if projector is not None:  # the image encoder the engine loads beside its weights
            more = fetch_recording(resolve(model), projector.name, progress=progress)
            results = [*results, *more.results]
            recorded += more.recorded
        data["manifest"] = str(outcome.manifest_file)
        data["recorded"] = [{"file": r.label, "size": r.size, "sha256": r.sha256} for r in recorded]
        lines = [
            f"recorded {r.label} in {outcome.manifest_file}: size {r.size} "
            f"(placeholder said {r.guessed_size}), sha256 {r.sha256}"
            for r in recorded
        ]
        if not recorded:
            lines.append(
                f"nothing to record: {artifact.name} has no placeholder files in "
                f"{outcome.manifest_file}"
            )
    else:
        results = fetch(manifest, artifact, progress=progress, command=command)
        if projector is not None:
            results = [*results, *fetch(manifest, projector, progress=progress, command=command)]
        lines = []
    if as_json:
        data["files"] = [
            {"path": str(r.path), "action": r.action, **({"note": r.note} if r.note else {})}
            for r in results
        ]
        click.echo(json.dumps(data, indent=2))
        return
    for line in lines + [f"{r.action}: {r.path}" for r in results]:
        click.echo(line)
    for result in results:
        if result.note:
            click.echo(f"note: {result.path.name}: {result.note}", err=True)


def _probe() -> HostProfile:
    from hwprobe.load import load_host

    return load_host()
