"""How compatible engines are ranked: one ordered list of named criteria.

Each :class:`Criterion` carries the sentence recorded in every Decision (``precedence``), the sort
key it contributes and the ``why`` text that explains a win on it. The order of
:data:`CRITERIA` *is* the precedence: the sort key, the recorded precedence and the explanation
of a pick are all read from it, so they cannot drift apart (formerly a prose list, a key tuple
and a function indexing that tuple by position had to be kept in step by hand). The last
criterion, manifest order, is the only tie-break by position.

The criteria read nothing but the :class:`Judged` values they compare: what the hardware table
says about an engine's place (its class's rank and label, the sufficient speed) is recorded when
the engine is judged, under the tables ``select`` was given (:meth:`Judged.under`).

A model ladder ranks (option x engine) pairs with two more criteria in front, marked ``ladder``:
the decode-speed floor, then the option's place in the ladder. They are part of the same list,
recorded in a ladder's precedence and left out of a single model's, whose ranking they could not
change anyway (every engine of one model has the same option). Each criterion also says how a
loser lost on it (``lost``), which is how a ladder explains why each larger option was not
chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snapbuild.estimate.common import quantization_bits
from snapbuild.selection.decision import Candidate
from snapbuild.selection.hardware import Accel, HardwareTable


@dataclass(frozen=True)
class Rung:
    """A ladder option's place, as the ranking sees it."""

    name: str
    rank: int  # 0: the best option (the manifest lists them best first)
    floor: float  # tokens/s an option must decode at here to beat a faster, smaller one


@dataclass(frozen=True)
class Judged:
    """One engine as the ranking sees it: its candidate and the facts the criteria read."""

    candidate: Candidate
    accel: Accel
    verified: bool  # the memory fit was checked against a known figure
    index: int  # position in the manifest
    warnings: list[str]
    accel_rank: int  # the class's place in the hardware table, best first
    accel_label: str  # how ``why`` names the class
    sufficient: float  # tokens/s beyond which speed no longer decides
    missing: tuple[str, ...] = ()  # inputs the model takes that this engine will not serve
    rung: Rung | None = None  # a ladder: the option this engine runs

    @classmethod
    def under(
        cls,
        hw: HardwareTable,
        candidate: Candidate,
        accel: Accel,
        verified: bool,
        index: int,
        warnings: list[str],
        missing: tuple[str, ...] = (),
        rung: Rung | None = None,
    ) -> Judged:
        """An engine judged under ``hw``: the table's part in its ranking is read now, so
        ranking needs no table and two engines of one selection compare like with like."""
        return cls(
            candidate,
            accel,
            verified,
            index,
            warnings,
            hw.accel_rank(accel),
            hw.accel_label(accel),
            hw.sufficient_tokens_per_second,
            missing,
            rung,
        )

    def key(self) -> tuple[Any, ...]:
        """The sort key: one element per criterion, in precedence order (smaller ranks first)."""
        return rank_key(self)


@dataclass(frozen=True)
class Criterion:
    """One ranking criterion: ``key`` orders engines (smaller first); ``why`` says how the
    winner beat the runner-up when this is the first criterion on which they differ, ``lost``
    how a loser lost to the winner (by default the winner's ``why``); ``ladder`` criteria rank
    a ladder's options and are recorded only in a ladder's precedence."""

    name: str
    precedence: str
    key: Callable[[Judged], Any]
    why: Callable[[Judged, Judged], str]
    lost: Callable[[Judged, Judged], str] | None = None
    ladder: bool = False

    def loss(self, loser: Judged, winner: Judged) -> str:
        """How ``loser`` lost to ``winner`` on this criterion."""
        return self.lost(loser, winner) if self.lost else self.why(winner, loser)


def _tps(j: Judged) -> float:
    return j.candidate.estimated_tokens_per_second or 0.0


def named(j: Judged) -> str:
    """An engine as a ladder names it: the option it runs, then the engine."""
    return f"{j.rung.name} on {j.candidate.engine}" if j.rung else j.candidate.engine


def _floor(j: Judged) -> float:
    return j.rung.floor if j.rung else 0.0


def _floor_key(j: Judged) -> float:
    # up to the floor a faster engine wins; above it speed no longer decides between options
    return -min(_tps(j), _floor(j)) if j.rung else 0.0


def _known(j: Judged) -> bool:
    """Whether the fit was checked against a figure: the device's free memory, or at least an
    upper bound (total RAM where available RAM was not reported)."""
    return j.candidate.memory is not None and j.candidate.memory.available is not None


def _option_key(j: Judged) -> tuple[int, int]:
    # a fit checked against a figure lets the better option win; an unknown one (VRAM nobody
    # reported) never justifies a larger model, so among those the smaller option wins
    if j.rung is None:
        return (0, 0)
    return (0, j.rung.rank) if _known(j) else (1, -j.rung.rank)


def _why_floor(w: Judged, r: Judged) -> str:
    return (
        f"{named(w)} decodes ~{_tps(w):g} tokens/s; runner-up {named(r)} ~{_tps(r):g}, below the "
        f"{_floor(w):g} tokens/s floor"
    )


def _lost_floor(loser: Judged, w: Judged) -> str:
    return (
        f"on {loser.candidate.engine} ~{_tps(loser):g} tokens/s here, below the "
        f"{_floor(loser):g} tokens/s floor"
    )


def _why_option(w: Judged, r: Judged) -> str:
    if _known(w) and not _known(r):
        return f"{named(w)}'s memory is known; runner-up {named(r)}'s fit cannot be checked"
    if not _known(w):
        return f"{named(w)} is the smaller option and neither fit can be checked (memory unknown)"
    return f"{named(w)} is a better model option than runner-up {named(r)}"


def _lost_option(loser: Judged, w: Judged) -> str:
    if not _known(loser):
        return (
            f"its fit on {loser.candidate.engine} cannot be checked (the device's memory is "
            "unknown): a larger option is chosen only where its fit can be"
        )
    return f"smaller than the selected {named(w)} (runs here on {loser.candidate.engine})"


def _quality_or_footprint(j: Judged) -> float:
    # a verified fit lets quality win; an unverified one prefers the smaller footprint
    if j.verified:
        return -quantization_bits(j.candidate.quantization)
    return j.candidate.memory.required if j.candidate.memory else 0


def _why_inputs(w: Judged, r: Judged) -> str:
    return (
        f"{w.candidate.engine} reads images, runner-up {r.candidate.engine} would serve this "
        "vision model text only: serving every input decides first"
    )


def _why_accel(w: Judged, r: Judged) -> str:
    return (
        f"{w.candidate.engine} runs on the {w.accel_label}, runner-up {r.candidate.engine} on "
        f"the {r.accel_label}: accelerator class decides first"
    )


def _why_verified(w: Judged, r: Judged) -> str:
    return f"{w.candidate.engine}'s memory fit is verified; runner-up {r.candidate.engine}'s is not"


def _why_speed(w: Judged, r: Judged) -> str:
    return (
        f"{w.candidate.engine} decodes ~{_tps(w):g} tokens/s, runner-up "
        f"{r.candidate.engine} ~{_tps(r):g} (same accelerator class)"
    )


def _why_quality(w: Judged, r: Judged) -> str:
    win, run = w.candidate.engine, r.candidate.engine
    both = f"{win} and runner-up {run} both reach the sufficient {w.sufficient:g} tokens/s"
    if not w.verified:
        return f"{both} and their fit is unverified; {win} needs less memory"
    return (
        f"{both}; {w.candidate.quantization} keeps more precision than {r.candidate.quantization}"
    )


def _why_faster_still(w: Judged, r: Judged) -> str:
    win, run = w.candidate.engine, r.candidate.engine
    return (
        f"{win} and runner-up {run} both exceed the sufficient {w.sufficient:g} tokens/s "
        f"with {w.candidate.quantization}; {win} is faster still "
        f"(~{_tps(w):g} vs ~{_tps(r):g} tokens/s)"
    )


def _why_order(w: Judged, r: Judged) -> str:
    return (
        f"{w.candidate.engine} ties with runner-up {r.candidate.engine} on class, fit, speed and "
        "quantization; it comes first in the manifest"
    )


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "speed-floor",
        "a ladder: estimated decode tokens/s up to the floor (min-tokens-per-second): a larger "
        "option must decode at least that fast here",
        _floor_key,
        _why_floor,
        _lost_floor,
        ladder=True,
    ),
    Criterion(
        "model-option",
        "a ladder: the better model option (listed best first) where the fit was checked "
        "against the device's memory; where that memory is unknown, the smaller option",
        _option_key,
        _why_option,
        _lost_option,
        ladder=True,
    ),
    Criterion(
        "inputs",
        "serves every input the model takes (a vision model: images too) before text only",
        lambda j: len(j.missing),
        _why_inputs,
    ),
    Criterion(
        "accelerator-class",
        "accelerator class (discrete GPU > integrated GPU > NPU > CPU)",
        lambda j: j.accel_rank,
        _why_accel,
    ),
    Criterion(
        "fit-verified",
        "memory fit verified before fit unknown",
        lambda j: 0 if j.verified else 1,
        _why_verified,
    ),
    Criterion(
        "sufficient-speed",
        "estimated decode tokens/s (bandwidth x runtime efficiency / weight bytes), "
        "capped at the sufficient speed",
        lambda j: -min(_tps(j), j.sufficient),
        _why_speed,
    ),
    Criterion(
        "quantization",
        "better quantization (more bits per weight); smaller footprint when the fit is unverified",
        _quality_or_footprint,
        _why_quality,
    ),
    Criterion(
        "speed",
        "uncapped decode tokens/s (e.g. CUDA before Vulkan on one GPU)",
        lambda j: -_tps(j),
        _why_faster_still,
    ),
    Criterion("manifest-order", "manifest order", lambda j: j.index, _why_order),
)

PRECEDENCE: tuple[str, ...] = tuple(c.precedence for c in CRITERIA if not c.ladder)
LADDER_PRECEDENCE: tuple[str, ...] = tuple(c.precedence for c in CRITERIA)


def rank_key(judged: Judged) -> tuple[Any, ...]:
    """Every criterion's key, in precedence order."""
    return tuple(c.key(judged) for c in CRITERIA)


def deciding_criterion(winner: Judged, runner: Judged) -> Criterion:
    """The first criterion on which ``winner`` and ``runner`` differ (manifest order at last)."""
    return next((c for c in CRITERIA if c.key(winner) != c.key(runner)), CRITERIA[-1])


def why(winner: Judged, runner: Judged | None, rejected: int, forced: bool) -> str:
    """Why ``winner`` was selected: asked for by name, alone, or the criterion that decided."""
    if forced:
        return f"{winner.candidate.engine} was asked for by name and is compatible"
    if runner is None:
        return f"{winner.candidate.engine} is the only compatible engine ({rejected} rejected)"
    return deciding_criterion(winner, runner).why(winner, runner)
