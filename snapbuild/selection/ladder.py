"""A ladder's options on one host: which one won, and why each of the others did not.

The ranking (:mod:`snapbuild.selection.ranking`) orders (option x engine) pairs; what a person
asks of a ladder is per option: "why do I get 4b and not 12b?". Each option's answer is read
from the same criteria: an option that runs here lost to the winner on the first criterion
where its best engine and the winner differ (:meth:`Criterion.loss`: below the decode-speed
floor, or a fit that could not be verified); an option that runs nowhere here says what stops it
on the engine closest to the winner (the winner's own engine, when it applies to that option).
"""

from __future__ import annotations

from collections.abc import Sequence

from snapbuild.manifest.ladder import option_facts
from snapbuild.manifest.model import Manifest, Modality
from snapbuild.selection.decision import OptionVerdict
from snapbuild.selection.ranking import Judged, deciding_criterion, named, why


def option_verdicts(
    ladder: Manifest, judged: Sequence[Judged], ranked: Sequence[Judged], winner: Judged | None
) -> tuple[OptionVerdict, ...]:
    """Every option of ``ladder`` on this host, best first (``ranked``: the compatible pairs,
    best first; ``winner``: the selected one, which a forced choice may put below first)."""
    out = []
    for option in ladder.options:
        own = [j for j in judged if j.rung and j.rung.name == option.name]
        best = next((j for j in ranked if j.rung and j.rung.name == option.name), None)
        runs = _runs(winner, option.name)
        chosen = winner if runs else best  # its engine here: the selected one, or its best
        shown = chosen or _closest(own, winner)
        out.append(
            OptionVerdict(
                option=option.name,
                title=option.title,
                inputs=_inputs(ladder, option.name),
                parameters=option_facts(ladder, option).parameters,
                size=ladder.artifact(shown.candidate.artifact).size if shown else 0,
                fits=best is not None,
                engine=chosen.candidate.engine if chosen else None,
                estimated_tokens_per_second=chosen.candidate.estimated_tokens_per_second
                if chosen
                else None,
                selected=runs,
                reason="selected" if runs else _reason(best, shown, winner, own),
            )
        )
    return tuple(out)


def _engine(j: Judged) -> str:
    return j.candidate.engine


def _inputs(ladder: Manifest, option: str) -> tuple[Modality, ...]:
    """What the option's files read together (text, and images where it has an encoder)."""
    given = {m for a in ladder.artifacts if a.option == option for m in a.inputs}
    order: tuple[Modality, ...] = ("text", "vision", "audio")
    return tuple(m for m in order if m in given)


def _closest(own: Sequence[Judged], winner: Judged | None) -> Judged | None:
    """The engine whose blockers best explain why an option runs nowhere: the winner's engine
    when it runs this option too, else the one with the fewest blockers (manifest order)."""
    if winner is not None:
        same = next((j for j in own if j.candidate.engine == winner.candidate.engine), None)
        if same is not None:
            return same
    return min(own, key=lambda j: (len(j.candidate.blockers), j.index), default=None)


def _runs(winner: Judged | None, option: str) -> bool:
    """Whether the selected engine runs ``option`` (forced, it may not be the option's best)."""
    return winner is not None and winner.rung is not None and winner.rung.name == option


def _reason(
    best: Judged | None, shown: Judged | None, winner: Judged | None, own: Sequence[Judged]
) -> str:
    """Why an option that is not the selected one lost, or what stops it here."""
    if best is not None and winner is not None and best.key() < winner.key():
        return f"runs here on {_engine(best)}; {named(winner)} was asked for"
    if best is not None and winner is not None:
        lost = deciding_criterion(best, winner).loss(best, winner)
        blocked = next((j for j in own if _engine(j) == _engine(winner)), None)
        if blocked is None or blocked.candidate.compatible:
            return lost
        return f"{_engine(winner)}: {'; '.join(blocked.candidate.blockers)}; {lost}"
    if best is not None:
        return f"runs here on {best.candidate.engine}"
    if shown is None:
        return "no engine of this snap runs it"
    return f"{shown.candidate.engine}: {'; '.join(shown.candidate.blockers)}"


def ladder_why(
    verdicts: Sequence[OptionVerdict],
    winner: Judged,
    ranked: Sequence[Judged],
    judged: Sequence[Judged],
    forced: bool,
) -> str:
    """Why the winner runs: which option and why not the next larger one, then which engine."""
    assert winner.rung is not None
    name, floor = winner.rung.name, winner.rung.floor
    same = [j for j in ranked if j.rung and j.rung.name == name]
    runner = next((j for j in same if j is not winner), None)
    rejected = sum(1 for j in judged if j.rung and j.rung.name == name) - len(same)
    engine = why(winner, runner, rejected, forced)
    if forced:
        return f"{name} on {engine}"
    tps = winner.candidate.estimated_tokens_per_second or 0.0
    if tps < floor:
        option = f"no option decodes {floor:g} tokens/s here; {name} is the fastest"
    else:
        option = f"the best option that fits and decodes at least {floor:g} tokens/s here"
    larger = [v for v in verdicts[: winner.rung.rank] if not v.selected]
    if larger:
        option += f" (the next larger, {larger[-1].option}: {larger[-1].reason})"
    return f"{name}: {option}; {engine}"


def parameters_text(count: int | None) -> str:
    """A parameter count as model cards write it: 27B, 3.9B, 268M, 662K ("-" when unknown)."""
    if not count:
        return "-"
    unit, scale = next(
        ((u, s) for u, s in (("B", 1e9), ("M", 1e6), ("K", 1e3)) if count >= s), ("", 1.0)
    )
    return f"{count / scale:.2g}{unit}"
