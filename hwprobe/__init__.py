"""hwprobe: facts about a machine (CPU, memory, disk, GPUs, NPUs), read from a filesystem root.

Facts only, no policy: every probe takes a ``root`` so that recorded machines replay in tests.
"""

from hwprobe.profile import HostProfile

__all__ = ["HostProfile", "probe"]


def probe(root: str = "/", **kwargs: object) -> HostProfile:
    """Probe the machine under ``root`` (see :func:`hwprobe.probes.probe_host`)."""
    from hwprobe.probes import probe_host

    return probe_host(root, **kwargs)  # type: ignore[arg-type]
