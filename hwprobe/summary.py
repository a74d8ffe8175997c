"""The short human summary ``hwprobe`` prints: CPU, ISA level, RAM, each device and its use.

hwprobe states facts and imports nothing of ours but :mod:`snapcommon`. Which runtimes a GPU is
good for is the runtime catalog's knowledge, one layer up, so the caller passes it in
(``gpu_uses``); the installed ``hwprobe`` command does (:mod:`runtimes.probe_cli`). NPU lines
need no such help: hwprobe's own PCI table names the runtimes that drive each NPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hwprobe.profile import CpuFacts, GpuFacts, HostProfile, NpuFacts, VulkanFacts
from snapcommon.sizes import gib as size

GpuUses = Callable[[GpuFacts], Sequence[str]]
"""What a GPU is good for (runtime ids, in the caller's order); empty: say nothing."""


def _cpu_line(cpu: CpuFacts) -> str:
    counts = []
    if cpu.cores is not None:
        counts.append(f"{cpu.cores} cores")
    if cpu.threads is not None:
        counts.append(f"{cpu.threads} threads")
    isa = cpu.x86_64_level or (",".join(cpu.arm64_features) if cpu.arm64_features else None)
    isa = isa or cpu.riscv_isa
    details = ", ".join(filter(None, [cpu.architecture, isa, " / ".join(counts) or None]))
    return f"CPU:     {cpu.model_name or cpu.vendor or 'unknown model'} ({details})"


def _gpu_line(gpu: GpuFacts, gpu_uses: GpuUses | None) -> str:
    slot = gpu.pci.slot if gpu.pci else "?"
    kind = {True: "integrated", False: "discrete", None: "integrated or discrete: unknown"}[
        gpu.integrated
    ]
    if gpu.integrated:
        memory = "shares system RAM"
        if gpu.shared_memory:
            memory += f" (up to {size(gpu.shared_memory)})"
    else:
        memory = f"{size(gpu.vram)} VRAM"
    extra = [f"compute {gpu.compute_capability}"] if gpu.compute_capability else []
    extra += [gpu.gfx] if gpu.gfx else []
    uses = list(gpu_uses(gpu)) if gpu_uses is not None else []
    line = f"GPU:     {gpu.vendor} {gpu.name or ''} [{slot}] {kind}, {memory}"
    line += "".join(f", {e}" for e in extra)
    return line + (f"; good for {', '.join(uses)}" if uses else "")


def _npu_line(npu: NpuFacts) -> str:
    slot = npu.pci.slot if npu.pci else "?"
    loaded = {True: "loaded", False: "NOT loaded", None: "unknown"}[npu.driver_loaded]
    driver = f"driver {npu.driver}: {loaded}" if npu.driver else "no known driver"
    if npu.runtimes:
        use = f"good for {', '.join(npu.runtimes)}"
    elif npu.llm_capable:
        use = "no runtime here drives it"
    else:
        use = "cannot run LLMs"
    return f"NPU:     {npu.vendor} {npu.name or ''} [{slot}] {driver}; {use}"


def _vulkan_lines(vulkan: VulkanFacts | None) -> list[str]:
    """One line per Vulkan device; a software one says it is the CPU, not a GPU."""
    if vulkan is None:
        return []
    if vulkan.devices is None:
        names = ", ".join(d.manifest.rpartition("/")[2] for d in vulkan.drivers)
        return [f"Vulkan:  drivers {names or 'none'}; devices not listed"]
    lines = []
    for dev in vulkan.devices:
        where = dev.pci_slot or f"device {dev.index}"
        kind = "software, runs on the CPU: not a GPU" if dev.software else dev.device_type
        lines.append(f"Vulkan:  {dev.name} [{where}] {kind}")
    return lines or ["Vulkan:  drivers installed, no device"]


def summary(profile: HostProfile, gpu_uses: GpuUses | None = None) -> str:
    """A few lines a person reads at a glance; ``--json`` is for programs. ``gpu_uses`` adds
    "good for ..." to each GPU line (None: facts only)."""
    lines = [_cpu_line(c) for c in profile.cpus] or ["CPU:     unknown"]
    mem = profile.memory
    ram = f"RAM:     {size(mem.total)}"
    if mem.available is not None:
        ram += f" ({size(mem.available)} available)"
    lines.append(ram + (f", swap {size(mem.swap_total)}" if mem.swap_total else ""))
    if profile.disk:
        disk = profile.disk
        lines.append(f"Disk:    {size(disk.free)} free of {size(disk.total)} at {disk.path}")
    lines += [_gpu_line(g, gpu_uses) for g in profile.gpus] or ["GPU:     none that can run models"]
    lines += [_npu_line(n) for n in profile.npus]
    lines += _vulkan_lines(profile.vulkan)
    for display in profile.displays:
        slot = display.pci.slot if display.pci else "?"
        lines.append(f"Display: {display.vendor} {display.name or ''} [{slot}]: {display.reason}")
    if profile.warnings:
        lines.append("Warnings:")
        for warning in profile.warnings:
            lines.append(f"  - {warning.source}: {warning.message}")
            if warning.resolution:
                lines.append(f"    fix: {warning.resolution}")
    return "\n".join(lines)
