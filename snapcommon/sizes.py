"""Byte counts as people read them: memory in binary units (GiB, MiB), the unit every tool on
the machine (``free -h``, ``nvidia-smi``) reports memory in, so numbers compare at a glance."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2


def gib(value: float | None, digits: int = 1) -> str:
    """``value`` bytes as GiB with ``digits`` decimals; "unknown" for None."""
    return "unknown" if value is None else f"{value / GIB:.{digits}f} GiB"


def memory(value: float) -> str:
    """Bytes as GiB with one decimal, or whole MiB below 1 GiB (where GiB would read 0.x)."""
    return f"{value / MIB:.0f} MiB" if value < GIB else gib(value)
