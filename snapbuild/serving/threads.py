"""How many CPU threads a runtime should use on a host: one rule for `snapbuild serve` and the
in-snap daemon, so the same machine gets the same setting either way."""

from __future__ import annotations

from hwprobe.profile import HostProfile


def default_threads(host: HostProfile) -> int | None:
    """Physical cores (llama.cpp runs fastest with one thread per core), else logical CPUs."""
    cores = [c.cores for c in host.cpus]
    if cores and all(n for n in cores):
        return sum(n for n in cores if n)
    return host.threads
