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

This module only puts the parts together (:mod:`snapbuild.selection`: devices, conditions,
memory fit, judging, ranking); the names other modules import from it stay here.
"""

from __future__ import annotations

import math

from hwprobe.profile import HostProfile, ProbeWarning
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Decision, Selected
from snapbuild.selection.judging import judge
from snapbuild.selection.ranking import PRECEDENCE, Judged, why
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
    tables: SelectionTables | None = None,
) -> Decision:
    """Judge every engine of ``manifest`` on ``host``, rank the compatible ones, pick one.

    ``engine`` forces that engine (it is selected only if compatible). ``tables``: the runtime
    catalog, hardware, serving and batching tables to judge by (None: the packaged ones). Pure:
    reads nothing but its arguments and the estimator's own constants (:mod:`.tables` says why
    those are not arguments).
    """
    tables = tables or packaged_tables()
    if engine is not None and manifest.engine(engine) is None:
        raise UsageError(
            f"{manifest.name} has no engine named {engine!r}",
            resolution="use one of: " + ", ".join(e.name for e in manifest.engines),
        )
    judged = [
        judge(manifest, e, i, host, include_experimental or engine == e.name, tables)
        for i, e in enumerate(manifest.engines)
    ]
    ranked = sorted((j for j in judged if j.candidate.compatible), key=Judged.key)
    rank_of = {j.candidate.engine: n for n, j in enumerate(ranked, start=1)}
    candidates = tuple(
        j.candidate.model_copy(update={"rank": rank_of.get(j.candidate.engine)})
        for j in sorted(judged, key=lambda j: (rank_of.get(j.candidate.engine, math.inf), j.index))
    )
    winner: Judged | None
    if engine is not None:
        winner = next((j for j in ranked if j.candidate.engine == engine), None)
        runner = None
    else:
        winner = ranked[0] if ranked else None
        runner = ranked[1] if len(ranked) > 1 else None
    selected = None
    warnings = list(host.warnings)
    if winner is not None:
        c = winner.candidate
        assert c.context_size is not None
        selected = Selected(
            why=why(winner, runner, len(judged) - len(ranked), engine is not None),
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
        precedence=PRECEDENCE,
    )
