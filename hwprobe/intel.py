"""Intel GPU facts: integrated or discrete, and a discrete GPU's local memory.

Intel iGPUs share system RAM, so their VRAM is null (unknown is not zero, and there is none of
their own) and ``shared-memory`` says how much RAM the driver lets them address when OpenCL
recorded it. Discrete GPUs (Arc) are told by device-id ranges in the table; their local memory
comes from the xe/i915 sysfs files the table names, else from a recorded ``run/clinfo.json``.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass

from hwprobe._fs import RootFS
from hwprobe.gpu import GpuPart, GpuProbe
from hwprobe.pci import PciDevice
from hwprobe.tables import pci_table

CLINFO = "/run/clinfo.json"


@dataclass(frozen=True)
class ClDevice:
    """What OpenCL said about one GPU."""

    global_memory: int | None
    host_unified: bool | None


def is_discrete(device_id: str) -> bool:
    """True for device ids in the table's discrete ranges (Arc, Flex, Max)."""
    return any(r.contains(device_id) for r in pci_table().intel_discrete_ranges)


def clinfo_devices(fs: RootFS) -> dict[str, ClDevice]:
    """PCI slot -> OpenCL's answer, from a recorded ``clinfo --json``."""
    if not fs.exists(CLINFO):
        return {}
    try:
        data = json.loads(fs.text(CLINFO, source="intel") or "")
    except ValueError:
        fs.warn("intel", f"{fs.path(CLINFO)} is not JSON", "record it again with `clinfo --json`")
        return {}
    found: dict[str, ClDevice] = {}
    platforms = data.get("devices", []) if isinstance(data, dict) else []
    for platform in platforms if isinstance(platforms, list) else []:
        for dev in platform.get("online", []) if isinstance(platform, dict) else []:
            slot = str(dev.get("CL_DEVICE_PCI_BUS_INFO_KHR", "")).rpartition(" ")[2].lower()
            memory = dev.get("CL_DEVICE_GLOBAL_MEM_SIZE")
            unified = dev.get("CL_DEVICE_HOST_UNIFIED_MEMORY")
            if slot:
                found[slot] = ClDevice(
                    global_memory=memory if isinstance(memory, int) else None,
                    host_unified=unified if isinstance(unified, bool) else None,
                )
    return found


def local_memory(fs: RootFS, device: PciDevice) -> int | None:
    """A discrete GPU's local memory from the first sysfs file of the table that exists."""
    for pattern in pci_table().intel_local_memory_files:
        head, _, name = pattern.rpartition("/")
        parents = _expand(fs, f"{device.path}/{head}") if head else [device.path]
        for parent in parents:
            if fs.exists(f"{parent}/{name}"):
                value = fs.int_value(f"{parent}/{name}", source="intel", base=10)
                if value:
                    return value
    return None


def _expand(fs: RootFS, path: str) -> list[str]:
    """Expand one ``*`` component of a path (``drm/card*``)."""
    parts = path.split("/")
    for index, part in enumerate(parts):
        if "*" in part:
            parent = "/".join(parts[:index])
            rest = "/".join(parts[index + 1 :])
            return [
                "/".join(filter(None, [parent, match, rest]))
                for match in fnmatch.filter(fs.listdir(parent), part)
            ]
    return [path]


def intel_gpus(fs: RootFS, devices: Sequence[PciDevice]) -> GpuProbe:
    """The probe of Intel GPUs: the recorded OpenCL answer is read once for all of them."""
    cl = clinfo_devices(fs)
    return lambda device: intel_facts(fs, device, cl)


def intel_facts(fs: RootFS, device: PciDevice, cl: dict[str, ClDevice]) -> GpuPart:
    """Integrated or discrete, VRAM of a discrete GPU, RAM an iGPU may use."""
    slot = device.ids.slot
    recorded = cl.get(slot)
    if not is_discrete(device.ids.device_id):
        shared = recorded.global_memory if recorded else None
        return GpuPart(integrated=True, shared_memory=shared)
    vram = local_memory(fs, device)
    if vram is None and recorded is not None:
        vram = recorded.global_memory
    if vram is None:
        fs.warn(
            "intel",
            f"could not read the local memory of the Intel discrete GPU at {slot}",
            "use the xe driver (kernel 6.8 or newer) or install intel-opencl-icd and record "
            "`clinfo --json` with `hwprobe capture`",
        )
    return GpuPart(integrated=False, vram=vram)
