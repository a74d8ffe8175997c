"""The whole probe: small probes put together into one :class:`HostProfile`.

Each probe reads through one :class:`RootFS` (so a capture replays like the live machine) and
records warnings there instead of raising; this module only orders them and joins the facts.
"""

from __future__ import annotations

from hwprobe._fs import RootFS
from hwprobe.amd import amd_facts, kfd_nodes
from hwprobe.cpu import probe_cpus
from hwprobe.intel import clinfo_devices, intel_facts
from hwprobe.memory import probe_disk, probe_memory
from hwprobe.npu import accel_nodes, npu_facts
from hwprobe.nvidia import NvmlQuery, gather_answers, nvidia_facts
from hwprobe.pci import Classified, PciScan, classify, display_facts, render_nodes, scan_pci
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


def probe_gpus(fs: RootFS, items: list[Classified], nvml: NvmlQuery | None) -> tuple[GpuFacts, ...]:
    """GPU facts for the classified GPUs, with each vendor's own source of memory facts."""
    renders = render_nodes(fs) if items else {}
    nodes = kfd_nodes(fs) if any(i.vendor_name == "amd" for i in items) else {}
    cl = clinfo_devices(fs) if any(i.vendor_name == "intel" for i in items) else {}
    nvidia_slots = [i.device.ids.slot for i in items if i.vendor_name == "nvidia"]
    nv = {}
    if nvidia_slots:
        nv = nvidia_facts(
            fs, nvidia_slots, gather_answers(fs, nvml), replay=not fs.is_live and nvml is None
        )
    gpus = []
    for item in items:
        ids = item.device.ids
        base: dict[str, object] = {
            "vendor": item.vendor_name,
            "name": item.entry.name if item.entry else None,
            "pci": ids,
            "device_nodes": renders.get(ids.slot, ()),
        }
        if item.vendor_name == "amd":
            amd = amd_facts(fs, item.device, nodes)
            base.update(
                integrated=amd.integrated,
                unified_memory=bool(amd.integrated),
                vram=amd.vram,
                gfx=amd.gfx,
            )
        elif item.vendor_name == "intel":
            intel = intel_facts(fs, item.device, cl)
            base.update(
                integrated=intel.integrated,
                unified_memory=intel.integrated,
                vram=intel.vram,
                shared_memory=intel.shared_memory,
            )
        elif item.vendor_name == "nvidia":
            facts = nv[ids.slot]
            base.update(
                integrated=False,
                name=facts.name or base["name"],
                vram=facts.vram,
                vram_free=facts.vram_free,
                compute_capability=facts.compute_capability,
                driver_version=facts.driver_version,
                cuda_version=facts.cuda_version,
                device_nodes=tuple(base["device_nodes"]) + facts.device_nodes,  # type: ignore[arg-type]
            )
        gpus.append(GpuFacts(**base))  # type: ignore[arg-type]
    return tuple(gpus)


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
