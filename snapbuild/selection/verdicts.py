"""How the verdicts on one engine are collected and worded.

Every check, passed or failed, becomes a reason string in the order it was made, so that
``why-not`` and the install log explain a decision without rerunning it; the failed ones are
also the engine's blockers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024**3


def gib(n: int | float) -> str:
    """Bytes as GiB with one decimal (MiB below 1 GiB), the units people compare memory in."""
    if n < GIB:
        return f"{n / 1024**2:.0f} MiB"
    return f"{n / GIB:.1f} GiB"


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
