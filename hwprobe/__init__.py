"""hwprobe: facts about a machine (CPU, memory, disk, GPUs, NPUs), read from a filesystem root.

Facts only, no policy: every probe takes a ``root`` so that recorded machines replay in tests.
The profile model is imported on first use, so ``hwprobe.cli`` can set up the process before
any pydantic model exists (see :mod:`hwprobe._startup`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hwprobe.profile import HostProfile

__all__ = ["HostProfile", "probe"]


def probe(root: str = "/", **kwargs: object) -> HostProfile:
    """Probe the machine under ``root`` (see :func:`hwprobe.probes.probe_host`)."""
    from hwprobe.probes import probe_host

    return probe_host(root, **kwargs)  # type: ignore[arg-type]


def __getattr__(name: str) -> Any:
    if name == "HostProfile":
        from hwprobe.profile import HostProfile

        return HostProfile
    raise AttributeError(f"module 'hwprobe' has no attribute {name!r}")
