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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snapbuild.estimate.common import quantization_bits
from snapbuild.selection.decision import Candidate
from snapbuild.selection.hardware import Accel, HardwareTable


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
        )

    def key(self) -> tuple[Any, ...]:
        """The sort key: one element per criterion, in precedence order (smaller ranks first)."""
        return rank_key(self)


@dataclass(frozen=True)
class Criterion:
    """One ranking criterion: ``key`` orders engines (smaller first); ``why`` says how the
    winner beat the runner-up when this is the first criterion on which they differ."""

    name: str
    precedence: str
    key: Callable[[Judged], Any]
    why: Callable[[Judged, Judged], str]


def _tps(j: Judged) -> float:
    return j.candidate.estimated_tokens_per_second or 0.0


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

PRECEDENCE: tuple[str, ...] = tuple(c.precedence for c in CRITERIA)


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
