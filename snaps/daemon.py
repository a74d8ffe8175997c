"""The server app (`inference-snap daemon`): start the API for the recorded engine.

It checks before it loads: an engine that does not fit this machine (any more) or whose
components are missing exits non-zero at once with a message in the service log, instead of
loading weights, being killed for memory and being restarted by systemd again and again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from snapbuild.errors import EXIT_NO_ENGINE, SnapbuildError
from snaps.artifacts import resolve
from snaps.manager import Context, components_for, engine_components, probe_host, select

REEXEC_MARK = "SNAPBUILD_DAEMON_REEXEC"


class DaemonError(SnapbuildError):
    """The daemon cannot start; the message ends up in the service log and in `status`."""


def runtime_dir(ctx: Context, engine: str) -> Path:
    """The runtime component's directory; every component of the engine must be installed."""
    comps = engine_components(ctx, engine)
    missing = [ctx.env.component_dir(c) for c in comps if not ctx.env.component_dir(c).is_dir()]
    if missing:
        raise DaemonError(
            f"engine {engine}'s components are not installed",
            details="missing: " + ", ".join(str(d) for d in missing),
            resolution=f"Run `{ctx.env.name} use-engine {engine}` to install them.",
            exit_code=EXIT_NO_ENGINE,
        )
    return ctx.env.component_dir(components_for(ctx.manifest, engine)[0])


def artifact_path(ctx: Context, engine: str) -> Path:
    """What the runtime loads, in whichever layout the weights are (see :mod:`snaps.artifacts`)."""
    return resolve(ctx.env, ctx.manifest, engine)


def prepare_imports(runtime_dir: Path) -> None:
    """Make the runtime component's Python packages and native libraries loadable.

    Native libraries need LD_LIBRARY_PATH before the process starts, so the daemon re-executes
    itself once with it set.
    """
    site = runtime_dir / "lib" / "python3" / "site-packages"
    if site.is_dir():
        sys.path.insert(0, str(site))
    lib = runtime_dir / "lib"
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if lib.is_dir() and str(lib) not in current.split(":") and not os.environ.get(REEXEC_MARK):
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = f"{lib}:{current}" if current else str(lib)
        env[REEXEC_MARK] = "1"
        os.execve(sys.executable, [sys.executable, "-m", "snaps.cli", "daemon"], env)


def check_fit(ctx: Context, engine: str, forced: bool) -> None:
    """Refuse to start an engine the selector rejects on the machine as it is now."""
    if forced:
        return
    host, _, only_cpu = probe_host(ctx)
    decision = select(ctx.manifest, host, engine=engine, only_cpu=only_cpu)
    cand = decision.candidate(engine)
    if cand is None or not cand.compatible:
        raise DaemonError(
            f"engine {engine} does not fit this machine now; not starting",
            details="; ".join(cand.blockers) if cand else "the engine is not in this snap",
            resolution=f"Free memory, or run `{ctx.env.name} use-engine --auto`.",
            exit_code=EXIT_NO_ENGINE,
        )


def run() -> None:
    """Start the server for the recorded decision with the configured settings."""
    ctx = Context.load()
    decision = ctx.require_decision()
    state = ctx.state()
    if decision.selected is None:
        raise DaemonError(
            "no engine fits this machine; the server does not start",
            details=state.problem,
            resolution=f"Run `{ctx.env.name} status` for the reasons.",
            exit_code=EXIT_NO_ENGINE,
        )
    engine = decision.selected.engine
    settings = ctx.settings(decision=decision)
    runtime = runtime_dir(ctx, engine)
    model_path = artifact_path(ctx, engine)
    prepare_imports(runtime)
    check_fit(ctx, engine, state.forced)
    os.environ.update(settings.env)
    ctx.env.running_path.write_text(json.dumps(settings.to_data(), indent=2) + "\n")
    sys.stderr.write(
        f"starting {engine} ({decision.selected.runtime} on {decision.selected.device}) "
        f"on http://{settings.host}:{settings.port}/v1 with context {settings.context_size}\n"
    )
    sys.stderr.flush()
    from runtimes.server import run as serve

    serve(
        ctx.manifest,
        engine,
        host=settings.host,
        port=settings.port,
        context_size=settings.context_size,
        threads=None,
        artifact_path=model_path,
    )
