"""Constructed hosts for the selector's tests: an AVX2 x86-64 machine with chosen RAM, GPUs and
NPUs, each fact set by hand so a test says exactly what the machine has."""

from __future__ import annotations

from hwprobe.profile import CpuFacts, GpuFacts, HostProfile, MemoryFacts, NpuFacts, PciIds

GIB = 1024**3
AVX2 = ("avx", "avx2", "f16c", "fma", "sse4_2")


def cpu(flags: tuple[str, ...] = AVX2, arch: str = "amd64") -> CpuFacts:
    return CpuFacts(architecture=arch, vendor="GenuineIntel", flags=flags, threads=8)


def nvidia(vram: int | None, device: str = "0x2504", cc: str | None = "8.6") -> GpuFacts:
    pci = PciIds(slot="0000:01:00.0", pci_class="0x0300", vendor_id="0x10de", device_id=device)
    return GpuFacts(
        vendor="nvidia",
        name="GeForce RTX",
        pci=pci,
        vram=vram,
        compute_capability=cc,
        integrated=False,
    )


def intel_igpu() -> GpuFacts:
    pci = PciIds(slot="0000:00:02.0", pci_class="0x0300", vendor_id="0x8086", device_id="0x64a0")
    return GpuFacts(vendor="intel", name="Arc 140V", pci=pci, integrated=True, unified_memory=True)


def intel_npu(loaded: bool | None) -> NpuFacts:
    pci = PciIds(slot="0000:00:0b.0", pci_class="0x1200", vendor_id="0x8086", device_id="0x643e")
    return NpuFacts(
        vendor="intel",
        name="Intel NPU (Lunar Lake)",
        pci=pci,
        driver="intel_vpu",
        driver_loaded=loaded,
        llm_capable=True,
    )


def host(
    *,
    ram: int | None = 16 * GIB,
    gpus: tuple[GpuFacts, ...] = (),
    npus: tuple[NpuFacts, ...] = (),
    flags: tuple[str, ...] = AVX2,
) -> HostProfile:
    return HostProfile(
        cpus=(cpu(flags),), memory=MemoryFacts(total=ram, available=ram), gpus=gpus, npus=npus
    )
