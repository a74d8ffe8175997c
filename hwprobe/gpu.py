"""One GPU's facts: what the PCI table knows, merged with what its vendor's own source says.

Each vendor probe (``amd.py``, ``intel.py``, ``nvidia.py``) returns a :class:`GpuPart` holding
only what that vendor's source can know (kfd's gfx target, OpenCL's shared memory, NVML's
compute capability...), every field optional; :func:`gpu_facts` is the one place a
:class:`GpuFacts` is built from it, so every rule that joins the two (the driver's name over the
table's, render nodes before the vendor's own nodes, unified memory from integrated) is written
once and checked by mypy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwprobe.pci import Classified, PciDevice
from hwprobe.profile import GpuFacts


@dataclass(frozen=True, kw_only=True)
class GpuPart:
    """What one vendor's source says about one GPU; ``None`` (or ``()``) where it says nothing.

    The meanings are :class:`GpuFacts`' own; ``name`` is the driver's name for the GPU, which
    wins over the PCI table's, and ``device_nodes`` are the vendor's nodes (``/dev/nvidia0``)
    beyond the DRM render nodes every GPU may have.
    """

    name: str | None = None
    integrated: bool | None = None
    vram: int | None = None
    vram_free: int | None = None
    shared_memory: int | None = None
    compute_capability: str | None = None
    gfx: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    device_nodes: tuple[str, ...] = ()


# The probe of one of a vendor's GPUs, made once the vendor's machine-wide sources are read.
GpuProbe = Callable[[PciDevice], GpuPart]


def gpu_facts(item: Classified, render_nodes: tuple[str, ...], part: GpuPart) -> GpuFacts:
    """A GPU's facts: its PCI identity and table name, its render nodes, its vendor's part.

    A GPU that shares the system's RAM addresses it as its own, so ``unified_memory`` is
    ``integrated`` (unknown counts as no: nothing may plan on memory it cannot be sure of).
    """
    return GpuFacts(
        vendor=item.vendor_name,
        name=part.name or (item.entry.name if item.entry else None),
        pci=item.device.ids,
        integrated=part.integrated,
        unified_memory=bool(part.integrated),
        vram=part.vram,
        vram_free=part.vram_free,
        shared_memory=part.shared_memory,
        compute_capability=part.compute_capability,
        gfx=part.gfx,
        driver_version=part.driver_version,
        cuda_version=part.cuda_version,
        device_nodes=render_nodes + part.device_nodes,
    )
