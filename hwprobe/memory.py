"""System memory (``/proc/meminfo``) and the free space where snaps are stored.

meminfo values are in kB with a ``kB`` suffix; a value without a unit is taken as bytes (some
recorded machines store bytes). A replayed machine's disk comes from ``run/disk-stats.json``
(what ``hwprobe capture`` records); a live one from ``statvfs``.
"""

from __future__ import annotations

import json
import os

from hwprobe._fs import RootFS
from hwprobe.profile import DiskFacts, MemoryFacts

SNAP_STORE = "/var/lib/snapd/snaps"
DISK_STATS = "/run/disk-stats.json"

_FIELDS = {
    "MemTotal": "total",
    "MemAvailable": "available",
    "SwapTotal": "swap_total",
    "SwapFree": "swap_free",
}


def parse_meminfo(text: str) -> dict[str, int]:
    """meminfo keys to bytes; lines that are not ``Key: number [kB]`` are skipped."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        words = rest.split()
        if not sep or not words or not words[0].isdigit():
            continue
        scale = 1024 if len(words) > 1 and words[1].lower() == "kb" else 1
        values[key.strip()] = int(words[0]) * scale
    return values


def probe_memory(fs: RootFS) -> MemoryFacts:
    """RAM and swap in bytes; a warning when the total is unknown."""
    text = fs.text("/proc/meminfo", source="memory")
    values = parse_meminfo(text or "")
    facts = MemoryFacts(**{field: values.get(key) for key, field in _FIELDS.items()})
    if facts.total is None:
        fs.warn(
            "memory",
            f"could not read the total RAM from {fs.path('/proc/meminfo')}",
            "make sure /proc is mounted (or captured) and readable",
        )
    return facts


def probe_disk(fs: RootFS, path: str | None = None) -> DiskFacts:
    """Free and total bytes of the disk holding ``path`` (default: the snap store, else ``/``)."""
    recorded = _recorded_disk(fs, path)
    if recorded is not None:
        return recorded
    candidates = [path] if path else [SNAP_STORE, "/"]
    for candidate in candidates:
        if not os.path.isdir(fs.path(candidate)):
            continue
        try:
            st = os.statvfs(fs.path(candidate))
        except OSError as exc:
            fs.warn("disk", f"could not stat {fs.path(candidate)}: {exc.strerror}", None)
            continue
        return DiskFacts(
            path=candidate, total=st.f_blocks * st.f_frsize, free=st.f_bavail * st.f_frsize
        )
    fs.warn(
        "disk",
        f"{fs.path(candidates[0])} does not exist, so free disk space is unknown",
        "pass a directory that exists (hwprobe --disk-path DIR)",
    )
    return DiskFacts(path=candidates[0])


def _recorded_disk(fs: RootFS, path: str | None) -> DiskFacts | None:
    if fs.is_live or not fs.exists(DISK_STATS):
        return None
    text = fs.text(DISK_STATS, source="disk")
    try:
        stats = json.loads(text or "")
    except ValueError:
        fs.warn("disk", f"{fs.path(DISK_STATS)} is not JSON", "record the machine again")
        return None
    if not isinstance(stats, dict):
        return None
    for candidate in [path] if path else [SNAP_STORE, "/"]:
        entry = stats.get(candidate)
        if isinstance(entry, dict):
            total, free = entry.get("total"), entry.get("avail", entry.get("free"))
            return DiskFacts(
                path=candidate,
                total=total if isinstance(total, int) else None,
                free=free if isinstance(free, int) else None,
            )
    return None
