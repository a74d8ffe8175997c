"""The selector: manifest + HostProfile -> Decision. A pure function of its arguments.

Every engine is judged against the host: the requirements written in the manifest, the ones
implied by its runtime (a CUDA engine needs an NVIDIA GPU even when the manifest forgot to
say so), and whether the model fits the memory that device uses at a context that is still
useful. Each verdict, passed or failed, becomes a reason string, so ``why-not`` and the
install log explain themselves. Compatible engines are ranked by an ordered list of named
criteria (:data:`snapbuild.selection.ranking.CRITERIA`); the precedence recorded in every
Decision, the sort key and the ``why`` of a pick are all read from it, and its last criterion,
manifest order, is the only tie-break.

Unknown facts are handled deliberately (see docs/selection.md):
- a GPU whose memory is unknown is accepted when its device is in the nominal-VRAM table
  (the fit is checked against that figure) and otherwise accepted *with a warning*, ranked
  after engines whose fit was verified in the same accelerator class;
- an NPU whose driver state is unknown is rejected, as are CPU flags or a gfx target that
  could not be read: guessing wrong there crashes the engine (SIGILL, no device), and a
  CPU engine is always there to fall back to.

The tables (runtime catalog, hardware, serving and batching) are an argument too
(:class:`snapbuild.selection.tables.SelectionTables`, the packaged ones by default), so a test or a
third party can select under its own catalog without touching the packaged loaders.

A model ladder (``options`` in the manifest) is judged as (option x engine) pairs, one
single-model view of the manifest per option (:mod:`snapbuild.manifest.ladder`), and ranked by
the same criteria with the ladder's two in front: the decode-speed floor and the option's place
(:mod:`snapbuild.selection.ladder` says why each larger option lost).

This module only puts the parts together (:mod:`snapbuild.selection`: devices, conditions,
memory fit, judging, ranking); the names other modules import from it stay here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hwprobe.profile import HostProfile, ProbeWarning
from snapbuild.manifest.ladder import min_tokens_per_second as min_speed
from snapbuild.manifest.ladder import option_names, views
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, Decision, Selected
from snapbuild.selection.judging import judge, with_plans
from snapbuild.selection.ladder import ladder_why, option_verdicts
from snapbuild.selection.ranking import LADDER_PRECEDENCE, PRECEDENCE, Judged, Rung, why
from snapbuild.selection.tables import SelectionTables, packaged_tables
from snapbuild.selection.verdicts import gib
from snapcommon.errors import UsageError

__all__ = ["PRECEDENCE", "Judged", "SelectionTables", "gib", "judge", "packaged_tables", "select"]


def select(
    manifest: Manifest,
    host: HostProfile,
    *,
    include_experimental: bool = False,
    engine: str | None = None,
    option: str | None = None,
    min_tokens_per_second: float | None = None,
    tables: SelectionTables | None = None,
) -> Decision:
    """Judge every engine of ``manifest`` on ``host``, rank the compatible ones, pick one.

    A ladder is judged as (option x engine) pairs, one single-model view per option. ``engine``
    forces that engine and ``option`` that model option (selected only if compatible).
    ``min_tokens_per_second``: the ladder's decode-speed floor (None: the manifest's).
    ``tables``: the runtime catalog, hardware, serving and batching tables to judge by (None:
    the packaged ones). Pure: reads nothing but its arguments and the estimator's own constants
    (:mod:`.tables` says why those are not arguments).
    """
    tables = tables or packaged_tables()
    _check_names(manifest, engine, option)
    floor = min_tokens_per_second or min_speed(manifest)
    index = {e.name: i for i, e in enumerate(manifest.engines)}
    rungs = _rungs(manifest, floor)
    judged = [
        judge(view, e, index[e.name], host, include_experimental or engine == e.name, tables, rung)
        for rung, view in rungs
        for e in view.engines
    ]
    ranked = sorted((j for j in judged if j.candidate.compatible), key=Judged.key)
    rank_of = {id(j): n for n, j in enumerate(ranked, start=1)}
    forced = engine is not None or option is not None
    winner = next((j for j in ranked if _asked(j, engine, option)), None)
    plans = _planner(rungs, winner, tables)
    candidates = tuple(
        plans(j).model_copy(update={"rank": rank_of.get(id(j))})
        for j in sorted(judged, key=lambda j: _listed(j, rank_of))
    )
    runner = None if forced or len(ranked) < 2 else ranked[1]
    verdicts = option_verdicts(manifest, judged, ranked, winner) if manifest.is_ladder else ()
    selected = None
    warnings = list(host.warnings)
    if winner is not None:
        c = plans(winner)
        assert c.context_size is not None
        if winner.rung is not None:
            reason = ladder_why(verdicts, winner, ranked, judged, forced)
        else:
            reason = why(winner, runner, len(judged) - len(ranked), forced)
        selected = Selected(
            why=reason,
            **{name: getattr(c, name) for name in Selected.model_fields if name != "why"},
        )
        warnings += [ProbeWarning(source="selector", message=m) for m in winner.warnings]
        if any(f.placeholder for f in manifest.artifact(c.artifact).files):
            warnings.append(
                ProbeWarning(
                    source="selector",
                    message=f"artifact {c.artifact} has placeholder URL, size or checksum",
                    resolution="run `snapbuild fetch` to record verified values in the manifest",
                )
            )
    return Decision(
        model=manifest.name,
        selected=selected,
        candidates=candidates,
        warnings=tuple(warnings),
        precedence=LADDER_PRECEDENCE if manifest.is_ladder else PRECEDENCE,
        options=verdicts,
    )


def _planner(
    rungs: list[tuple[Rung | None, Manifest]], winner: Judged | None, tables: SelectionTables
) -> Callable[[Judged], Candidate]:
    """A ladder's candidates with their serving and batching plans for the option that runs
    (planning each size's would cost more than the ranking; the others keep none); a single
    model's were planned when judged."""
    views = {rung.name: view for rung, view in rungs if rung}
    chosen = winner.rung.name if winner and winner.rung else None
    planned: dict[int, Candidate] = {}

    def plans(j: Judged) -> Candidate:
        if j.rung is None or j.rung.name != chosen:
            return j.candidate
        if id(j) not in planned:
            planned[id(j)] = with_plans(views[chosen], j.candidate, tables)
        return planned[id(j)]

    return plans


def _rungs(manifest: Manifest, floor: float) -> list[tuple[Rung | None, Manifest]]:
    """Each single-model view with its place in the ladder (None: not a ladder)."""
    if not manifest.is_ladder:
        return [(None, manifest)]
    return [(Rung(v.view_of or "", k, floor), v) for k, v in enumerate(views(manifest))]


def _listed(j: Judged, rank_of: dict[int, int]) -> tuple[float, int, int]:
    """Where a candidate is listed: ranked ones first, then by option and manifest order."""
    return (rank_of.get(id(j), math.inf), j.rung.rank if j.rung else 0, j.index)


def _asked(j: Judged, engine: str | None, option: str | None) -> bool:
    """Whether ``j`` is what the caller asked for (anything, when nothing was asked)."""
    name_ok = engine is None or j.candidate.engine == engine
    return name_ok and (option is None or j.candidate.option == option)


def _check_names(manifest: Manifest, engine: str | None, option: str | None) -> None:
    if engine is not None and manifest.engine(engine) is None:
        raise UsageError(
            f"{manifest.name} has no engine named {engine!r}",
            resolution="use one of: " + ", ".join(e.name for e in manifest.engines),
        )
    if option is not None and manifest.option(option) is None:
        listed = ", ".join(option_names(manifest)) or "none: it holds one model"
        raise UsageError(
            f"{manifest.name} has no model option named {option!r}",
            resolution=f"use one of its options ({listed})",
        )
