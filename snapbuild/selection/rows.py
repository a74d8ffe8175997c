"""One row per engine of a Decision: what both ``engines`` commands list.

``snapbuild engines`` and an installed snap's ``engines`` show the same facts about each engine;
they are built here once so that "compatible", "rank", "active" and the memory fit mean the same
in both. The memory fit has two faces, named apart: :attr:`EngineRow.memory` is the figures
("needed/available") and :attr:`EngineRow.fits` the verdict (yes/no/unknown). Each command's
published JSON keeps its own key "fit" for the face it has always shown (``to_data``). A
ladder's rows are (option x engine) pairs and carry the option; a single model's rows read as
they always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from snapbuild.manifest.model import Engine
from snapbuild.selection.decision import Candidate, Decision
from snapbuild.selection.verdicts import gib


@dataclass(frozen=True)
class EngineRow:
    """One engine as the ``engines`` commands list it."""

    engine: str
    runtime: str
    device: str | None  # None: the decision has no candidate for this engine
    quantization: str | None
    compatible: bool
    rank: int | None
    active: bool  # the selected engine
    required: int | None  # bytes needed at the chosen context, None: not estimated
    available: int | None  # bytes of the memory it was checked against, None: unknown
    summary: str | None = None  # the manifest's one-line summary, when rows follow a manifest
    option: str | None = None  # a ladder: the model option this engine runs

    @property
    def memory(self) -> str:
        """The fit as figures: "needed/available" ("?" when unknown), "-" when not estimated."""
        if self.required is None:
            return "-"
        have = "?" if self.available is None else gib(self.available)
        return f"{gib(self.required)}/{have}"

    @property
    def fits(self) -> str:
        """The fit as a verdict: "yes", "no", or "unknown" when either figure is."""
        if self.required is None or self.available is None:
            return "unknown"
        return "yes" if self.required <= self.available else "no"

    def to_data(self, fit: Literal["memory", "verdict"]) -> dict[str, object]:
        """The JSON row; ``fit`` says which face of the fit the key "fit" holds."""
        ladder = {"option": self.option} if self.option is not None else {}
        return {
            **ladder,
            "engine": self.engine,
            "runtime": self.runtime,
            "device": self.device,
            "quantization": self.quantization,
            "compatible": self.compatible,
            "fit": self.memory if fit == "memory" else self.fits,
            "rank": self.rank,
            "active": self.active,
        }


def _row(
    cand: Candidate | None, engine: str, runtime: str, active: tuple[str, str | None] | None
) -> EngineRow:
    mem = cand.memory if cand else None
    option = cand.option if cand else None
    return EngineRow(
        engine=engine,
        runtime=runtime,
        device=cand.device if cand else None,
        quantization=cand.quantization if cand else None,
        compatible=bool(cand and cand.compatible),
        rank=cand.rank if cand else None,
        active=(engine, option) == active,
        required=mem.required if mem else None,
        available=mem.available if mem else None,
        option=option,
    )


def engine_rows(
    decision: Decision, engines: Sequence[Engine] | None = None, option: str | None = None
) -> list[EngineRow]:
    """The rows of ``decision``: in its candidates' order (ranked first), or, given a manifest's
    ``engines``, in their order with their summaries (an installed snap lists its manifest; a
    ladder's, the engines of ``option``, the one it runs)."""
    sel = decision.selected
    active = (sel.engine, sel.option) if sel else None
    if engines is None:
        return [_row(c, c.engine, c.runtime, active) for c in decision.candidates]
    return [
        replace(
            _row(decision.candidate(e.name, option), e.name, e.runtime, active),
            summary=e.summary,
            option=option,
        )
        for e in engines
    ]
