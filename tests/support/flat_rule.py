"""Canonical's flat rule for a model ladder, judged by our estimator on the recorded machines.

Canonical's newer inference snaps (gemma4: e2b / e4b / 26b) pick "the largest model that fits":
a size's declared memory + 200 MiB for the runtime + 2 GiB, against the best GPU's VRAM or, with
no GPU memory to read, the total RAM. This module applies that rule to the shipped gemma3 ladder
(declared memory: what the size downloads, its Q4_K_M weights plus its image encoder) and then
asks the real selector and estimator what that pick does on the machine: it runs the pick on the
device the rule measured (the GPU whose VRAM it read, else the CPU) at the manifest's default
context, with no stepping down (``min-context-size`` raised to the default), and reports the
peak it needs there against what the device has. ``benchmarks/ladder_vs_flat.py`` prints the
table; ``tests/test_ladder_vs_flat.py`` checks docs/selection.md carries exactly this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import hwprobe
from hwprobe.profile import HostProfile
from runtimes.catalog import load_catalog
from snapbuild.manifest.ladder import min_tokens_per_second, option_view
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, Decision
from snapbuild.selection.devices import vram
from snapbuild.selection.selector import select
from snapbuild.selection.tables import packaged_tables
from snapcommon.sizes import gib

MIB, GIB = 1 << 20, 1 << 30
RUNTIME = 200 * MIB  # Canonical's allowance for the runtime
SLACK = 2 * GIB  # and for everything else
QUANT = "Q4_K_M"  # the weights such a snap ships per size


@dataclass(frozen=True)
class Budget:
    """What the flat rule measures a size against: the best GPU's VRAM, else total RAM."""

    label: str  # "NVIDIA VRAM 6.0 GiB" / "RAM 15.5 GiB total"
    bytes: int
    device: str  # the device class the pick then runs on: gpu or cpu


@dataclass(frozen=True)
class Row:
    """One machine: what the flat rule picks, what we pick, and what the flat pick does."""

    machine: str
    budget: str
    flat: str  # the flat rule's size, or "none"
    ours: str  # our option/engine and context, or "none"
    outcome: str  # what running the flat pick at the default context means there


def declared(ladder: Manifest, option: str) -> int:
    """A size's declared memory: its Q4_K_M weights and its image encoder, as downloaded."""
    view = option_view(ladder, option)
    return sum(a.size for a in view.artifacts if a.quantization == QUANT or a.role == "projector")


def budget(host: HostProfile) -> Budget | None:
    """The best GPU's VRAM (the largest known figure), else total RAM; None when neither."""
    hw = packaged_tables().hardware
    known = [(v, g) for g in host.gpus if not g.integrated for v in (vram(g, hw)[0],) if v]
    if known:
        size, gpu = max(known, key=lambda pair: pair[0])
        return Budget(f"{hw.vendor_name(gpu.vendor)} VRAM {gib(size)}", size, "gpu")
    total = host.memory.total
    return Budget(f"RAM {gib(total)} total", total, "cpu") if total else None


def flat_pick(ladder: Manifest, host: HostProfile) -> tuple[Budget | None, str | None]:
    """The largest size whose declared memory + 200 MiB + 2 GiB fits the budget."""
    found = budget(host)
    if found is None:
        return None, None
    for option in ladder.options:
        if declared(ladder, option.name) + RUNTIME + SLACK <= found.bytes:
            return found, option.name
    return found, None


def at_default_context(ladder: Manifest, host: HostProfile, option: str, device: str) -> Decision:
    """The selector on ``option`` alone, engines of ``device`` only, its context pinned to the
    default: the estimator's verdict on running the flat pick as that rule would."""
    catalog = load_catalog()
    engines = tuple(
        e for e in ladder.engines if (entry := catalog.get(e.runtime)) and entry.device == device
    )
    pinned = ladder.model_copy(
        update={"engines": engines, "min_context_size": ladder.default_context_size}
    )
    return select(pinned, host, option=option)


def _ours(decision: Decision) -> str:
    sel = decision.selected
    if sel is None:
        return "none"
    return f"{sel.option} on {sel.engine}, {sel.context_size} tokens"


MEMORY = "needed even at the minimum context"  # how the memory fit words a miss


def _memory_miss(decision: Decision, option: str) -> Candidate | None:
    """The engine of ``option`` that only memory stops, with the smallest shortfall."""
    misses = [
        c
        for c in decision.candidates
        if c.option == option
        and len(c.blockers) == 1
        and MEMORY in c.blockers[0]
        and c.memory is not None
        and c.memory.available is not None
    ]
    return min(misses, key=lambda c: _shortfall(c), default=None)


def _shortfall(c: Candidate) -> int:
    assert c.memory is not None and c.memory.available is not None
    return c.memory.required - c.memory.available


def _none_fits(ladder: Manifest, ours: str | None) -> str:
    smallest = ladder.options[-1].name
    need = declared(ladder, smallest) + RUNTIME + SLACK
    text = f"runs no size: even {smallest} declares {gib(need)} with the allowances"
    return text + (f"; leaves {ours} unused" if ours else "")


def _failed(run: Decision, flat: str, context: int) -> str:
    miss = _memory_miss(run, flat)
    if miss is not None and miss.memory is not None and miss.memory.available is not None:
        return (
            f"out of memory at {context} tokens: {miss.engine} needs {gib(miss.memory.required)} "
            f"at the peak, {gib(miss.memory.available)} there"
        )
    first = next(c for c in run.candidates if c.option == flat)
    return f"cannot run: {first.blockers[0]}"


def outcome(
    ladder: Manifest, host: HostProfile, flat: str | None, ours: Decision, device: str
) -> str:
    """What the flat pick does here at the default context, and how it compares with ours."""
    mine = ours.selected.option if ours.selected else None
    if flat is None:
        return _none_fits(ladder, mine)
    run = at_default_context(ladder, host, flat, device)
    winner = run.winner()
    if winner is None:
        return _failed(run, flat, ladder.default_context_size)
    names = [o.name for o in ladder.options]
    if mine is not None and names.index(mine) < names.index(flat):
        return f"leaves {mine} unused, which fits and decodes at a usable speed"
    tps = winner.estimated_tokens_per_second or 0.0
    if mine != flat and tps < min_tokens_per_second(ladder):
        return (
            f"runs, at ~{tps:g} tokens/s on {winner.engine}: below the "
            f"{min_tokens_per_second(ladder):g} tokens/s floor"
        )
    if "vision" not in winner.inputs and "vision" in declared_inputs(ladder, flat):
        return "same size; text only here: its image encoder does not fit beside it"
    return "same size" if mine == flat else f"runs on {winner.engine}"


def declared_inputs(ladder: Manifest, option: str) -> set[str]:
    """What a size's files read (text, and images where it has an encoder)."""
    return {m for a in option_view(ladder, option).artifacts for m in a.inputs}


def compare(ladder: Manifest, machines: Path) -> list[Row]:
    """One row per recorded machine, in name order."""
    rows = []
    for root in sorted(p for p in machines.iterdir() if (p / "machine-root").is_dir()):
        host = hwprobe.probe(str(root / "machine-root"))
        found, flat = flat_pick(ladder, host)
        ours = select(ladder, host)
        device = found.device if found else "cpu"
        rows.append(
            Row(
                machine=root.name,
                budget=found.label if found else "unknown",
                flat=flat or "none",
                ours=_ours(ours),
                outcome=outcome(ladder, host, flat, ours, device),
            )
        )
    return rows


def markdown(rows: list[Row]) -> str:
    """The table as docs/selection.md carries it."""
    head = [
        "| machine | the flat rule reads | flat rule's pick | our pick "
        "| the flat pick at the default context |",
        "|---|---|---|---|---|",
    ]
    body = [f"| {r.machine} | {r.budget} | {r.flat} | {r.ours} | {r.outcome} |" for r in rows]
    return "\n".join(head + body) + "\n"
