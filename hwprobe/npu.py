"""NPU and accelerator facts: which driver should bind it, whether it did, and its device node.

Whether a driver is bound is read from the PCI device's ``driver`` link. A capture that recorded
no driver link for any device cannot say "unbound", so ``driver-loaded`` is then null (unknown)
rather than false. ``/dev/accel/accel*`` nodes are matched through ``sys/class/accel``.
"""

from __future__ import annotations

from hwprobe._fs import RootFS
from hwprobe.pci import Classified
from hwprobe.profile import NpuFacts


def accel_nodes(fs: RootFS) -> dict[str, tuple[str, ...]]:
    """PCI slot -> its ``/dev/accel/accel*`` nodes (through ``sys/class/accel/*/device``)."""
    nodes: dict[str, list[str]] = {}
    for name in fs.listdir("/sys/class/accel"):
        target = fs.link(f"/sys/class/accel/{name}") or f"sys/class/accel/{name}"
        slot = fs.link_name(f"{target}/device")
        if slot and fs.exists(f"/dev/accel/{name}"):
            nodes.setdefault(slot, []).append(f"/dev/accel/{name}")
    return {slot: tuple(found) for slot, found in nodes.items()}


def _driver_loaded(item: Classified, expected: str | None, drivers_recorded: bool) -> bool | None:
    bound = item.device.ids.driver
    if bound is not None:
        return bound == expected if expected else True
    return False if drivers_recorded else None


def npu_facts(
    fs: RootFS, item: Classified, nodes: dict[str, tuple[str, ...]], drivers_recorded: bool
) -> NpuFacts:
    """One NPU's facts; warnings when its driver is not bound or that is unknown."""
    entry = item.entry
    ids = item.device.ids
    expected = entry.driver if entry else None
    loaded = _driver_loaded(item, expected, drivers_recorded)
    label = entry.name if entry else f"accelerator {ids.vendor_id}:{ids.device_id}"
    note: str | None
    if loaded is None and expected:
        fs.warn(
            "npu",
            f"could not tell whether the {expected} driver is bound to the {label} at {ids.slot} "
            "(no driver link recorded)",
            "record the machine with `hwprobe capture DIR` to include driver links",
        )
    elif loaded is False and expected:
        fs.warn(
            "npu",
            f"the {label} at {ids.slot} is not driven by {expected}"
            + (f" (bound to {ids.driver})" if ids.driver else ""),
            f"load the driver: `sudo modprobe {expected}` (and install its firmware)",
        )
    if entry is None:
        note = "not in hwprobe's table: no known runtime drives it for LLMs"
    else:
        note = entry.note
    return NpuFacts(
        vendor=item.vendor_name,
        name=entry.name if entry else None,
        pci=ids,
        driver=expected,
        driver_loaded=loaded,
        device_nodes=nodes.get(ids.slot, ()),
        runtimes=entry.runtimes if entry else (),
        llm_capable=bool(entry.llm_capable) if entry else False,
        note=note,
    )
