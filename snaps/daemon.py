"""The server app (`inference-snap daemon`): start the API for the recorded engine.

It checks before it loads: when nothing fits, or the recorded engine does not fit this machine
(any more), or the operator switched the engine off, it loads nothing and answers on the port
why, instead of loading weights, being killed for memory and being restarted by systemd again
and again (:mod:`snaps.fallback`). Whatever stops the engine from serving, the port answers.

The components it needs may not be there yet when it starts: snapd installs the components an
install hook asks for only after the hook has succeeded, and may start the service meanwhile. So
the daemon waits for them (a few minutes, saying so in the log and in `status`) rather than
failing into a restart loop, then joins or gathers the weights (:func:`snaps.artifacts.ready`),
then serves, and publishes where (:mod:`snaps.discovery`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from hwprobe.profile import HostProfile
from runtimes.gateway.outage import Reason
from snapbuild.selection.decision import Decision
from snapbuild.serving.discovery import socket_path
from snapbuild.serving.threads import default_threads
from snapcommon.errors import EXIT_NO_ENGINE, SnapbuildError
from snapcommon.files import write_atomically
from snaps import artifacts, config, discovery
from snaps.fallback import (
    NothingFits,
    Unservable,
    advice,
    disabled,
    nothing_fits,
    outage_of,
    serve_outage,
)
from snaps.manager import Context, components_for, engine_components, probe_host, select

REEXEC_MARK = "SNAPBUILD_DAEMON_REEXEC"
# How long to wait for snapd to install the engine's components (test override, in seconds).
COMPONENT_WAIT_VAR = "SNAPBUILD_COMPONENT_WAIT"
COMPONENT_WAIT_S = 300.0
POLL_S = 0.5
REMIND_S = 30.0


class DaemonError(SnapbuildError):
    """The daemon cannot start; the message ends up in the service log and in `status`."""


def log(message: str) -> None:
    """The service log (the journal under snapd)."""
    sys.stderr.write(message.rstrip() + "\n")
    sys.stderr.flush()


def note(ctx: Context, phase: str, message: str) -> None:
    """Tell `status` what the daemon is doing (written atomically, where it can be)."""
    data = {"pid": os.getpid(), "phase": phase, "message": message}
    for path in ctx.env.daemon_status_paths:
        with contextlib.suppress(OSError):  # a status note must never stop the server
            write_atomically(path, json.dumps(data, indent=2) + "\n")
            return


class StateUnusable(DaemonError):
    """$SNAP_DATA is missing or cannot be written: a restart would fail the same way."""


def check_state_dir(path: Path) -> None:
    """The daemon records its settings and notes in ``path`` ($SNAP_DATA): it must be a
    writable directory. Written to, not asked: root passes every permission check."""
    probe = path / f".daemon-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        why = {errno.ENOENT: "missing", errno.ENOTDIR: "not a directory"}.get(
            exc.errno or 0, exc.strerror or str(exc)
        )
        raise StateUnusable(
            f"the snap's data directory {path} cannot be used ({why}); the server does not start",
            details="the server records its settings and its state there ($SNAP_DATA)",
            resolution="make it a writable directory again (reinstalling the snap recreates it), "
            "then `snapctl start` the service",
        ) from None


def _wait_limit() -> float:
    try:
        return float(os.environ.get(COMPONENT_WAIT_VAR) or COMPONENT_WAIT_S)
    except ValueError:
        return COMPONENT_WAIT_S


def wait_for_components(
    ctx: Context, engine: str, timeout: float | None = None, option: str | None = None
) -> Path:
    """Wait (bounded) until every component of ``engine`` (running ladder option ``option``) is
    installed; the runtime's directory.

    snapd mounts a component whole, so its directory appearing means its files are there.
    """
    limit = _wait_limit() if timeout is None else timeout
    comps = engine_components(ctx, engine, option)

    def missing() -> list[str]:
        return [c for c in comps if not ctx.env.component_dir(c).is_dir()]

    absent = missing()
    if absent:
        message = (
            f"waiting for components {', '.join(absent)} (snapd installs them after the "
            f"install hook; up to {limit:g}s)"
        )
        log(message)
        note(ctx, "waiting", message)
        start = time.monotonic()
        reminded = start
        while absent and time.monotonic() - start < limit:
            time.sleep(POLL_S)
            absent = missing()
            if absent and time.monotonic() - reminded >= REMIND_S:
                reminded = time.monotonic()
                log(f"still waiting for components {', '.join(absent)}")
        if absent:
            raise DaemonError(
                f"engine {engine}'s components were not installed within {limit:g}s",
                details="missing: " + ", ".join(str(ctx.env.component_dir(c)) for c in absent),
                resolution=f"See `snap changes` for a failed component install, then run "
                f"`{ctx.env.name} use-engine {engine}` to install them.",
                exit_code=EXIT_NO_ENGINE,
            )
        log(f"components present after {time.monotonic() - start:.1f}s")
    return ctx.env.component_dir(components_for(ctx.view(option), engine)[0])


def prepare_imports(runtime_dir: Path, library_paths: tuple[str, ...] | None = None) -> None:
    """Make the runtime component's Python packages and native libraries loadable.

    The library directories come from the one layout rule (:class:`runtimes.component_tree.
    ComponentTree`: ``usr/lib``, then staged ``usr/lib/<triplet>``). A llama.cpp tree is also
    named in ``SNAPBUILD_LLAMA_ROOT`` so llama-server and the binding run from it. Native
    libraries need LD_LIBRARY_PATH before the process starts, so the daemon re-executes itself
    once with it set.
    """
    from runtimes.component_tree import ROOT_VAR, ComponentTree

    site = runtime_dir / "lib" / "python3" / "site-packages"
    if site.is_dir():
        sys.path.insert(0, str(site))
    tree = ComponentTree(runtime_dir, *(() if library_paths is None else (library_paths,)))
    if tree.server.is_file() or (tree.root / "usr" / "lib" / "libllama.so").exists():
        os.environ[ROOT_VAR] = str(tree.root)
    current = os.environ.get("LD_LIBRARY_PATH", "")
    wanted = [str(d) for d in tree.library_dirs]
    if wanted and not set(wanted) <= set(current.split(":")) and not os.environ.get(REEXEC_MARK):
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = tree.library_path(current or None)
        env[REEXEC_MARK] = "1"
        os.execve(sys.executable, [sys.executable, "-m", "snaps.cli", "daemon"], env)


def runtime_library_paths(decision: Decision) -> tuple[str, ...] | None:
    """The engine's runtime component library directories, as its recipe lists them."""
    from runtimes.catalog import load_catalog

    assert decision.selected is not None
    entry = load_catalog().get(decision.selected.runtime)
    native = entry.build.native if entry and entry.build else None
    return native.library_paths if native else None


def check_fit(ctx: Context, engine: str, forced: bool, option: str | None = None) -> HostProfile:
    """Refuse to start an engine (running ladder option ``option``) the selector rejects on the
    machine as it is now; the host."""
    host, _, only_cpu = probe_host(ctx)
    if forced:
        return host
    decision = select(ctx.manifest, host, engine=engine, option=option, only_cpu=only_cpu)
    cand = decision.candidate(engine, option)
    if cand is None or not cand.compatible:
        raise NothingFits(
            f"engine {engine} does not fit this machine now; not starting",
            details="; ".join(cand.blockers) if cand else "the engine is not in this snap",
            resolution=f"Free memory, or run `{ctx.env.name} use-engine --auto`.",
        )
    return host


def runtime_threads(host: HostProfile, env: dict[str, str]) -> int | None:
    """CPU threads for the runtime: ``env.OMP_NUM_THREADS`` when the operator set one, else the
    same rule as `snapbuild serve` (:func:`snapbuild.serving.threads.default_threads`)."""
    value = env.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return default_threads(host)


class ModelUnloadable(Unservable):
    """The model file cannot be loaded: a restart would fail the same way."""

    reason: Reason = "load-failed"


def run() -> None:
    """Start the server for the recorded decision with the configured settings.

    Whatever keeps the engine from serving (nothing fits, the operator disabled it, the weights
    do not load, the components never came), the daemon keeps running and answers on the port
    why and what to do (:func:`snaps.fallback.serve_outage`); snapd restarts it when the
    operator changes the engine or the settings. Only a port it cannot have ends it.
    A $SNAP_DATA that is missing or read-only is the exception: the daemon could record
    nothing, so it logs why and ends with exit status 0 (snapd's ``restart-condition:
    on-failure`` then leaves it stopped; the note goes to $SNAP_COMMON).
    """
    from runtimes.gateway.server import PortInUseError

    ctx = Context.load()
    try:
        check_state_dir(ctx.env.data)
        _run(ctx)
    except PortInUseError as err:
        note(ctx, "failed", err.brief)
        raise
    except StateUnusable as err:
        note(ctx, "failed", err.brief)
        err.report()
        log("not restarting: a restart would fail the same way")
        raise SystemExit(0) from None
    except SnapbuildError as err:
        outage = outage_of(ctx, err)
        note(ctx, "unavailable", f"{outage.reason}: {err.brief}")
        err.report()
        serve_outage(ctx, outage)


def check_loadable(path: Path, fmt: str) -> None:
    """Refuse a file that is not the artifact's format before a runtime is loaded for it."""
    if fmt == "gguf" and path.is_file():
        with path.open("rb") as fh:
            head = fh.read(4)
        if head != b"GGUF":
            raise ModelUnloadable(
                f"{path} is not a GGUF file (it starts with {head!r})",
                resolution="the snap's weights are damaged or were built from the wrong file: "
                "rebuild the snap from a manifest that `snapbuild validate` accepts",
            )


def _run(ctx: Context) -> None:
    decision = ctx.require_decision()
    state = ctx.state()
    settings = ctx.settings(decision=decision)
    if settings.engine_enabled == "false":
        raise disabled(ctx)
    if decision.selected is None:
        raise nothing_fits(ctx, decision)
    engine, option = decision.selected.engine, decision.selected.option
    host = check_fit(ctx, engine, state.forced, option)
    runtime_dir = wait_for_components(ctx, engine, option=option)
    prepare_imports(runtime_dir, runtime_library_paths(decision))
    weights = _weights(ctx, decision)
    usable, ignored = config.runtime_env(settings.env)
    if ignored:
        names = ", ".join(f"env.{name}" for name in ignored)
        log(f"ignoring {names}: the snap's own environment owns them (`unset` them)")
    os.environ.update(usable)
    threads = runtime_threads(host, usable)
    ctx.env.running_path.write_text(json.dumps(settings.to_data(), indent=2) + "\n")
    _serve(ctx, decision, settings, runtime_dir, weights, threads, host)


def _weights(ctx: Context, decision: Decision) -> tuple[Path, Path | None]:
    """The engine's weights (a ladder: its option's), joined or gathered and checked, and its
    projector if it reads images here."""
    assert decision.selected is not None
    engine = decision.selected.engine
    served = ctx.view(decision.selected.option)  # a ladder: the option that runs
    note(ctx, "preparing", f"preparing the weights of {engine}")
    model_path = artifacts.ready(ctx.env, served, engine, log)
    projector = (
        artifacts.resolve_projector(ctx.env, served, engine)
        if "vision" in decision.selected.inputs
        else None  # no projector, or its image encoder does not fit here: text only
    )
    engine_entry = served.engine(engine)
    if engine_entry is not None:
        check_loadable(model_path, served.weights(engine_entry).format)
    return model_path, projector


def _serve(
    ctx: Context,
    decision: Decision,
    settings: config.Settings,
    runtime_dir: Path,
    weights: tuple[Path, Path | None],
    threads: int | None,
    host: HostProfile,
) -> None:
    """Serve the engine on the configured port and socket; publish where, and what passed.
    ``host``: this machine, to name a GPU engine's device as its backend counts."""
    from runtimes.gateway.images import ImagePolicy
    from runtimes.gateway.server import run as serve
    from snapbuild.serving.launch import serve_options
    from snapbuild.serving.plan import serving_plan

    selected = decision.selected
    assert selected is not None
    engine, url = selected.engine, f"http://{settings.host}:{settings.port}/v1"
    served = ctx.view(selected.option)  # a ladder: the option that runs, as a single model
    size = f"model {selected.option}, " if selected.option else ""
    log(
        f"starting {size}{engine} ({selected.runtime} on {selected.device}) on {url} with "
        f"context {settings.context_size}, {threads or 'default'} threads"
    )
    winner = decision.winner()
    memory = winner.memory if winner else None
    plan = serving_plan(served, selected, settings.context_size, memory)
    if plan is not None:
        log(f"serving: {plan.summary()}")
    options = serve_options(
        served,
        selected,
        artifact=weights[0],
        projector=weights[1],
        context_size=settings.context_size,
        threads=threads,
        host=settings.host,
        port=settings.port,
        llama_root=runtime_dir,  # the llama.cpp component tree (usr/bin/llama-server)
        cors_origins=settings.origins(),
        images=ImagePolicy(remote_urls=settings.remote_images == "true"),
        memory=memory,
        advice=advice(ctx, engine),
        unix_socket=socket_path(ctx.env.common),
        machine=host,
    )

    def listening(host: str, port: int) -> None:
        note(ctx, "loading", f"loading {engine}; listening on http://{host}:{port}/v1")
        discovery.publish(ctx, discovery.document(ctx, decision, settings, status="starting"))

    def ready(readiness: dict[str, Any]) -> None:
        outage = readiness.get("outage")
        if outage:
            note(ctx, "unavailable", f"{outage['reason']}: {outage['detail']}")
        else:
            note(ctx, "serving", f"serving {engine} on {url}")
        data = discovery.document(ctx, decision, settings, status="ok", readiness=readiness)
        discovery.publish(ctx, data)

    serve(options, on_listening=listening, on_ready=ready)
