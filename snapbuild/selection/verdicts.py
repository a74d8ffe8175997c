"""How the verdicts on one engine are collected and worded.

Every check, passed or failed, becomes a reason string in the order it was made, so that
``why-not`` and the install log explain a decision without rerunning it; the failed ones are
also the engine's blockers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from snapcommon.sizes import memory as gib

__all__ = ["Verdicts", "gib"]


@dataclass
class Verdicts:
    """Reasons gathered for one engine; a failed one also lands in ``blockers``."""

    reasons: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def ok(self, reason: str) -> None:
        self.reasons.append(reason)

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)
        self.blockers.append(reason)

    def check(self, passed: bool, reason: str) -> None:
        (self.ok if passed else self.fail)(reason)
