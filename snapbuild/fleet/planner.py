"""The fleet planner: one selector decision per distinct hardware profile, fanned out to hosts.

The selector is a pure function of (manifest, profile) under its tables, so hosts whose profiles
are equal (everything but the hostname, see :mod:`snapbuild.fleet.inventory`) share one decision.
A fleet of 100,000 hosts built from a few hundred kinds of machine costs a few hundred selector
calls; the rest is bookkeeping over plain dicts, never a pydantic object per host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwprobe.profile import HostProfile
from snapbuild.fleet.inventory import Inventory, InventoryIssue
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, Decision

if TYPE_CHECKING:  # the selector and its tables are imported when a plan is made
    from snapbuild.selection.tables import SelectionTables

# A host is "near its memory limit" when the selected engine leaves less than this fraction of
# the memory it is measured against (RAM or VRAM) free: a browser tab or a second service away
# from swapping or an out-of-memory kill.
NEAR_LIMIT_MARGIN = 0.10

Selector = Callable[[Manifest, HostProfile], Decision]


@dataclass(frozen=True)
class ProfileOutcome:
    """The decision for one distinct profile, pre-rendered in the shape each host reports."""

    decision: Decision
    selected: dict[str, Any] | None  # the "selected" block of a host in the JSON contract
    reasons: tuple[str, ...]
    near_limit: bool


@dataclass
class FleetPlan:
    """Every host with its outcome, the distinct profiles, and what was skipped."""

    model: str
    manifest: Manifest
    inventory: Inventory
    outcomes: dict[str, ProfileOutcome] = field(default_factory=dict)  # profile key -> outcome
    near_margin: float = NEAR_LIMIT_MARGIN

    @property
    def issues(self) -> list[InventoryIssue]:
        """Inventory entries that were reported and skipped."""
        return self.inventory.issues

    def outcome_of(self, key: str) -> ProfileOutcome:
        """The outcome shared by every host whose profile has ``key``."""
        return self.outcomes[key]

    @property
    def unplanned(self) -> int:
        """How many hosts got no engine."""
        return sum(1 for h in self.inventory.hosts if self.outcomes[h.key].selected is None)


def default_selector(
    *, include_experimental: bool = False, tables: SelectionTables | None = None
) -> Selector:
    """The project's selector (issue 3's pure function), bound to the command's options and to
    ``tables`` (None: the packaged ones), so a whole fleet is planned under one set of tables."""
    from snapbuild.selection.selector import select

    def run(manifest: Manifest, host: HostProfile) -> Decision:
        return select(manifest, host, include_experimental=include_experimental, tables=tables)

    return run


def plan_fleet(
    manifest: Manifest,
    inventory: Inventory,
    *,
    selector: Selector | None = None,
    near_margin: float = NEAR_LIMIT_MARGIN,
) -> FleetPlan:
    """Decide every distinct profile once and keep the outcomes by profile key."""
    select = selector or default_selector()
    plan = FleetPlan(manifest.name, manifest, inventory, near_margin=near_margin)
    used = {host.key for host in inventory.hosts}
    for key, profile in inventory.profiles.items():
        if key in used:
            plan.outcomes[key] = outcome(select(manifest, profile), near_margin)
    return plan


def outcome(decision: Decision, near_margin: float = NEAR_LIMIT_MARGIN) -> ProfileOutcome:
    """Render a decision into the per-host block of the plan."""
    chosen = decision.selected
    if chosen is None:
        return ProfileOutcome(decision, None, no_engine_reasons(decision), False)
    memory = memory_block(decision.winner(), near_margin)
    selected: dict[str, Any] = {
        **({"option": chosen.option} if chosen.option else {}),  # a ladder's model option
        "engine": chosen.engine,
        "runtime": chosen.runtime,
        "device": chosen.device,
        "vendor": chosen.vendor,
        "slot": chosen.slot,
        "context-size": chosen.context_size,
        "quantization": chosen.quantization,
        "artifact": chosen.artifact,
        "memory": memory,
    }
    near = bool(memory and memory["near-limit"])
    return ProfileOutcome(decision, selected, (chosen.why,), near)


def memory_block(candidate: Candidate | None, near_margin: float) -> dict[str, Any] | None:
    """Required and available bytes of the selected engine, the margin, and the near-limit flag."""
    if candidate is None or candidate.memory is None:
        return None
    estimate = candidate.memory
    available = estimate.available
    margin = None if available is None else available - estimate.required
    near = available is not None and margin is not None and margin < near_margin * available
    return {
        "pool": estimate.pool,
        "required": estimate.required,
        "available": available,
        "margin": margin,
        "near-limit": near,
    }


def no_engine_reasons(decision: Decision) -> tuple[str, ...]:
    """Why nothing fits: each engine's failed requirements, in the manifest's order (a ladder:
    on its smallest option, which is why no larger one fits either)."""
    reasons = []
    for candidate in decision.no_fit_candidates():
        blockers = candidate.blockers or tuple(r for r in candidate.reasons if r)
        reasons.append(f"{candidate.engine}: {'; '.join(blockers) or 'not selected'}")
    if not reasons:
        reasons.append(f"the manifest {decision.model!r} has no engine to judge on this host")
    return tuple(reasons)
