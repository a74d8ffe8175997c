"""The engine manager's library: what the hooks and the ``<snap>`` command share.

Probing, selecting, recording the decision and installing components happen here once; the
hooks call these with no questions asked, the CLI asks first. Everything reads the snap through
:class:`~snaps.env.SnapEnv` and talks to snapd through :class:`~snaps.snapctl.Snapctl`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hwprobe.profile import HostProfile
from hwprobe.replay import probe_from_environ
from runtimes.catalog import load_catalog
from snapbuild.manifest.ladder import view_for
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, Decision
from snapcommon.errors import SnapbuildError, UsageError
from snapcommon.files import write_atomically as _atomic_write
from snaps import config
from snaps.env import SnapEnv
from snaps.snapctl import Snapctl

HARDWARE_PLUG = "hardware-observe"


@dataclass
class State:
    """Notes the hooks keep beside the decision: why the snap runs (or does not run) as it does."""

    notes: list[str] = field(default_factory=list)  # e.g. the hardware-observe fallback
    problem: str | None = None  # why no engine runs, and what to do
    forced: bool = False  # the active engine was forced past the selector's verdict

    def to_data(self) -> dict[str, Any]:
        return {"notes": self.notes, "problem": self.problem, "forced": self.forced}


@dataclass
class Context:
    """One snap, as every command sees it."""

    env: SnapEnv
    snapctl: Snapctl
    manifest: Manifest

    @classmethod
    def load(cls, environ: dict[str, str] | None = None) -> Context:
        env = SnapEnv.from_environ(environ)
        return cls(env=env, snapctl=Snapctl(), manifest=load_snap_manifest(env))

    def view(self, option: str | None) -> Manifest:
        """What serves ``option``: a ladder's single-model view of it; a single model itself."""
        return view_for(self.manifest, option)

    def active_option(self, decision: Decision | None = None) -> str | None:
        """The ladder option the recorded (or given) decision runs; None for one model."""
        decision = decision if decision is not None else self.decision()
        return decision.selected.option if decision and decision.selected else None

    # records ---------------------------------------------------------------------------------
    def decision(self) -> Decision | None:
        """The recorded decision, None before the install hook wrote one."""
        path = self.env.decision_path
        if not path.exists():
            return None
        return Decision.model_validate_json(path.read_text(encoding="utf-8"))

    def require_decision(self) -> Decision:
        decision = self.decision()
        if decision is None:
            raise SnapbuildError(
                "no engine decision recorded yet",
                details=f"{self.env.decision_path} is missing: the install hook has not run.",
                resolution=f"Run `{self.env.name} use-engine --auto` to choose one now.",
            )
        return decision

    def state(self) -> State:
        path = self.env.state_path
        if not path.exists():
            return State()
        data = json.loads(path.read_text(encoding="utf-8"))
        return State(
            notes=list(data.get("notes", [])),
            problem=data.get("problem"),
            forced=bool(data.get("forced")),
        )

    def record(self, decision: Decision, state: State) -> None:
        """Write decision and state atomically (a reader never sees half a file)."""
        self.env.data.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.env.decision_path, decision.to_json() + "\n")
        _atomic_write(self.env.state_path, json.dumps(state.to_data(), indent=2) + "\n")

    def running(self) -> dict[str, Any] | None:
        """The settings the daemon last started with."""
        path = self.env.running_path
        if not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data

    # settings --------------------------------------------------------------------------------
    def stored(self) -> dict[str, Any]:
        """The snap's stored options, flat (``env.x`` keys)."""
        return config.flatten(self.snapctl.get(*config.KEYS, "env"))

    def settings(
        self, stored: dict[str, Any] | None = None, decision: Decision | None = None
    ) -> config.Settings:
        decision = decision if decision is not None else self.decision()
        default_context = decision.selected.context_size if decision and decision.selected else None
        return config.effective(
            self.stored() if stored is None else stored, self.manifest, default_context
        )

    def own_port(self) -> int | None:
        """The port our server holds now, if it runs."""
        running = self.running()
        if running and self.snapctl.service(self.env.service).active:
            return int(running["port"])
        return None


def load_snap_manifest(env: SnapEnv) -> Manifest:
    """The manifest packed into the snap."""
    from snapbuild.manifest.loader import load_manifest

    if not env.manifest_path.exists():
        raise SnapbuildError(
            "this snap carries no manifest",
            details=f"{env.manifest_path} is missing.",
            resolution="Rebuild the snap with `snapbuild make`, which packs it.",
        )
    return load_manifest(str(env.manifest_path))


# probing and selecting -----------------------------------------------------------------------
def probe_host(ctx: Context) -> tuple[HostProfile, list[str], bool]:
    """The machine as the selector sees it: (profile, notes, cpu_only).

    Without the ``hardware-observe`` connection the snap cannot read PCI devices, so only CPU
    engines are considered and a note says how to get the rest.
    """
    notes: list[str] = []
    connected = ctx.snapctl.is_connected(HARDWARE_PLUG)
    host = probe_from_environ()
    if not connected:
        notes.append(
            f"the {HARDWARE_PLUG} interface is not connected, so GPUs and NPUs cannot be seen: "
            f"chose among CPU engines only. Run `sudo snap connect {ctx.env.name}:{HARDWARE_PLUG}` "
            f"then `{ctx.env.name} use-engine --auto`."
        )
    return host, notes, not connected


def device_of(manifest: Manifest, engine: str) -> str:
    """The device class an engine's runtime drives."""
    eng = manifest.engine(engine)
    entry = load_catalog().get(eng.runtime) if eng else None
    return entry.device if entry else "cpu"


def cpu_only(manifest: Manifest) -> Manifest:
    """The manifest restricted to CPU engines (the safe choice without hardware-observe)."""
    engines = tuple(e for e in manifest.engines if device_of(manifest, e.name) == "cpu")
    return manifest.model_copy(update={"engines": engines}) if engines else manifest


def select(
    manifest: Manifest,
    host: HostProfile,
    *,
    engine: str | None = None,
    option: str | None = None,
    only_cpu: bool = False,
) -> Decision:
    """The selector's decision (pure), on the CPU-only manifest when asked; ``option``: a
    ladder's model option to run (None: the selector's choice)."""
    from snapbuild.selection.selector import select as run_selector

    chosen = cpu_only(manifest) if only_cpu else manifest
    return run_selector(chosen, host, engine=engine, option=option)


def forced_selection(
    decision: Decision, engine: str, manifest: Manifest | None = None, option: str | None = None
) -> Decision:
    """A decision whose winner is ``engine`` (running ``option``) even though the selector
    rejected it (--force); with the ``manifest``, llama-server's slots are planned in the memory
    the selector saw."""
    from snapbuild.selection.forced import forced

    if decision.candidate(engine, option) is None:
        raise UsageError(f"engine {engine!r} is not in this snap")
    how = f"`{'use-model' if option else 'use-engine'} --force`"
    return forced(decision, engine, manifest, option=option, how=how)


def components_for(manifest: Manifest, engine: str) -> list[str]:
    """The components an engine needs: its runtime build and its weights."""
    eng = manifest.engine(engine)
    if eng is None:
        raise UsageError(f"engine {engine!r} is not in this snap")
    entry = load_catalog().get(eng.runtime)
    runtime_component = entry.component if entry else eng.runtime
    return [runtime_component, manifest.weights(eng).name]


def engine_components(ctx: Context, engine: str, option: str | None = None) -> list[str]:
    """The components ``engine`` needs in this snap (running ladder option ``option``): as the
    builder packed them (every component of a split artifact), or runtime and artifact when the
    snap has no engine data."""
    from snaps.artifacts import engine_components as packed

    view = ctx.view(option)
    return packed(ctx.env, view, engine) or components_for(view, engine)


def missing_components(ctx: Context, engine: str, option: str | None = None) -> list[str]:
    """The components of ``engine`` (running ``option``) not installed yet."""
    needed = engine_components(ctx, engine, option)
    return [c for c in needed if not ctx.env.component_dir(c).exists()]


def stale_components(ctx: Context, engine: str, option: str | None) -> list[str]:
    """Installed weights of the ladder's other options: a switch of size removes them, so a
    snap holds one size at a time (a single model's snap never has any)."""
    from snaps.artifacts import option_components

    keep = set(engine_components(ctx, engine, option))
    other = {c for o, comps in option_components(ctx.env).items() if o != option for c in comps}
    return sorted(c for c in other - keep if ctx.env.component_dir(c).exists())


def engine_blockers(decision: Decision) -> list[str]:
    """``engine: why it cannot run here`` for every engine that says why nothing runs (a
    ladder: its smallest option's, since what stops the smallest stops every larger one)."""
    return [
        f"{c.engine}: {'; '.join(c.blockers) or 'does not fit'}"
        for c in decision.no_fit_candidates()
    ]


def no_engine_problem(ctx: Context, decision: Decision) -> str:
    """Why nothing fits, and what to do, in one paragraph for `status` (a ladder: why its
    smallest option does not run, which is why no larger one does)."""
    lines = [
        f"No engine of {ctx.manifest.name} fits this machine, so the server loads no model "
        "(its API answers 503 saying why)."
    ]
    if decision.options:
        lines.append(f"Not even the smallest model, {decision.options[-1].option}:")
    lines.extend(f"  {line}" for line in engine_blockers(decision))
    lines.append(
        f"Run `{ctx.env.name} why` for every reason; after freeing memory or adding hardware run "
        f"`{ctx.env.name} use-engine --auto`."
    )
    return "\n".join(lines)


def candidate_for(decision: Decision) -> Candidate | None:
    """The selector's verdict on the engine that runs."""
    return decision.winner()
