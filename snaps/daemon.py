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
from snaps.manager import Context, components_for, probe_host, select

REEXEC_MARK = "SNAPBUILD_DAEMON_REEXEC"


class DaemonError(SnapbuildError):
    """The daemon cannot start; the message ends up in the service log and in `status`."""


def runtime_paths(ctx: Context, engine: str) -> tuple[Path, Path]:
    """(runtime component dir, artifact component dir), both required to exist."""
    runtime_component, artifact_component = components_for(ctx.manifest, engine)
    dirs = (ctx.env.component_dir(runtime_component), ctx.env.component_dir(artifact_component))
    missing = [d for d in dirs if not d.is_dir()]
    if missing:
        raise DaemonError(
            f"engine {engine}'s components are not installed",
            details="missing: " + ", ".join(str(d) for d in missing),
            resolution=f"Run `{ctx.env.name} use-engine {engine}` to install them.",
            exit_code=EXIT_NO_ENGINE,
        )
    return dirs


def artifact_path(ctx: Context, engine: str, artifact_dir: Path) -> Path:
    """A single-file artifact is passed as its file, a multi-file one as its directory."""
    eng = ctx.manifest.engine(engine)
    assert eng is not None  # components_for checked it
    files = ctx.manifest.artifact(eng.artifact).files
    if len(files) == 1:
        path = artifact_dir / files[0].path
        if not path.exists():
            raise DaemonError(
                f"the model file {files[0].path} is missing from {artifact_dir}",
                resolution="Reinstall the component: "
                f"`snap install {ctx.env.name}+{eng.artifact}`.",
                exit_code=EXIT_NO_ENGINE,
            )
        return path
    return artifact_dir


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
    runtime_dir, artifact_dir = runtime_paths(ctx, engine)
    model_path = artifact_path(ctx, engine, artifact_dir)
    prepare_imports(runtime_dir)
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
