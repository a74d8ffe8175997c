"""The whole probe: small probes put together into one :class:`HostProfile`.

Each probe reads through one :class:`RootFS` (so a capture replays like the live machine) and
records warnings there instead of raising; this module only orders them and joins the facts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from hwprobe._fs import RootFS
from hwprobe.amd import amd_gpus
from hwprobe.cpu import probe_cpus
from hwprobe.gpu import GpuPart, GpuProbe, gpu_facts
from hwprobe.intel import intel_gpus
from hwprobe.memory import probe_disk, probe_memory
from hwprobe.npu import accel_nodes, npu_facts
from hwprobe.nvidia import NvmlQuery, nvidia_gpus
from hwprobe.pci import (
    Classified,
    PciDevice,
    PciScan,
    classify,
    display_facts,
    render_nodes,
    scan_pci,
)
from hwprobe.profile import DisplayFacts, GpuFacts, HostProfile, NpuFacts
from hwprobe.vulkan import start_vulkan


def probe_hostname(fs: RootFS) -> str | None:
    """The host name, None when not recorded."""
    text = (
        fs.text("/proc/sys/kernel/hostname", source="host")
        if fs.exists("/proc/sys/kernel/hostname")
        else None
    )
    return text.strip() or None if text else None


VendorProbe = Callable[[RootFS, Sequence[PciDevice]], GpuProbe]


def vendor_probes(nvml: NvmlQuery | None) -> dict[str, VendorProbe]:
    """Vendor (as hwprobe names it) -> the probe of its GPUs, in the order their machine-wide
    sources are read. A GPU vendor missing here gets the PCI table's facts alone. A function,
    not a constant, because NVIDIA's probe takes the injected ``nvml`` query."""
    return {
        "amd": amd_gpus,
        "intel": intel_gpus,
        "nvidia": functools.partial(nvidia_gpus, nvml=nvml),
    }


def probe_gpus(fs: RootFS, items: list[Classified], nvml: NvmlQuery | None) -> tuple[GpuFacts, ...]:
    """GPU facts for the classified GPUs, each with its vendor's own source of memory facts.

    Each vendor present reads its sources once (kfd, clinfo, NVML) before any GPU is probed,
    and only then is each GPU probed, in PCI order; so warnings keep one order, whatever the mix.
    """
    renders = render_nodes(fs) if items else {}
    probes = {
        vendor: make_probe(fs, devices)
        for vendor, make_probe in vendor_probes(nvml).items()
        if (devices := [i.device for i in items if i.vendor_name == vendor])
    }
    return tuple(
        gpu_facts(item, renders.get(item.device.ids.slot, ()), _probe(probes, item))
        for item in items
    )


def _probe(probes: dict[str, GpuProbe], item: Classified) -> GpuPart:
    """The vendor's facts about one GPU; none for a vendor hwprobe has no source for."""
    probe = probes.get(item.vendor_name)
    return probe(item.device) if probe else GpuPart()


def probe_devices(
    fs: RootFS, nvml: NvmlQuery | None
) -> tuple[tuple[GpuFacts, ...], tuple[NpuFacts, ...], tuple[DisplayFacts, ...]]:
    """GPUs, NPUs and displays from the PCI bus."""
    scan: PciScan | None = scan_pci(fs)
    if scan is None:
        return (), (), ()
    items = [c for d in scan.devices if (c := classify(d))]
    gpus = probe_gpus(fs, [i for i in items if i.role == "gpu"], nvml)
    npu_items = [i for i in items if i.role == "npu"]
    accel = accel_nodes(fs) if npu_items else {}
    npus = tuple(npu_facts(fs, i, accel, scan.drivers_recorded) for i in npu_items)
    displays = tuple(display_facts(i) for i in items if i.role == "display")
    return gpus, npus, displays


def probe_host(
    root: str = "/",
    *,
    runtimes: bool = False,
    disk_path: str | None = None,
    nvml: NvmlQuery | None = None,
) -> HostProfile:
    """Probe the machine under ``root``: fast facts, plus the slow ``runtimes`` section on request.

    ``nvml`` replaces the NVML query (tests replay NVML's answers and errors through it); without
    it a live root asks the driver and a recorded root reads ``run/nvidia-smi``.
    """
    fs = RootFS(root)
    vulkan = start_vulkan(fs)  # the live device query runs while the other probes do
    cpus = probe_cpus(fs)
    memory = probe_memory(fs)
    disk = probe_disk(fs, disk_path)
    gpus, npus, displays = probe_devices(fs, nvml)
    runtime_facts = None
    if runtimes:
        from hwprobe.runtime_support import probe_runtimes

        runtime_facts = probe_runtimes(fs)
    return HostProfile(
        hostname=probe_hostname(fs),
        cpus=cpus,
        memory=memory,
        disk=disk,
        gpus=gpus,
        npus=npus,
        displays=displays,
        vulkan=vulkan(),  # software Vulkan devices (lavapipe) are reported here, never as GPUs
        runtimes=runtime_facts,
        warnings=tuple(fs.warnings),
    )
