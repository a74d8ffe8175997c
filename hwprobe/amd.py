"""AMD GPU facts from sysfs: VRAM (``mem_info_vram_total``) and the kfd topology.

kfd (the ROCm kernel interface) lists one node per GPU with its ``gfx_target_version`` (100302
means gfx1032, the name ROCm builds are made for); a node is matched to its PCI device through
``drm_render_minor`` -> ``/sys/class/drm/renderD<minor>/device``, else through its PCI location.
An APU is told by the table of APU device ids, or by kfd listing CPU cores on the GPU's node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hwprobe._fs import RootFS
from hwprobe.gpu import GpuPart, GpuProbe
from hwprobe.pci import PciDevice
from hwprobe.tables import pci_table

KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"


@dataclass(frozen=True)
class KfdNode:
    """What kfd says about one GPU node."""

    gfx: str
    cpu_cores: int


def gfx_name(version: int) -> str | None:
    """kfd's ``gfx_target_version`` (major*10000 + minor*100 + stepping) as ``gfxNNNN``."""
    if version <= 0:
        return None
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def _properties(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].lstrip("-").isdigit():
            values[words[0]] = int(words[1])
    return values


def kfd_nodes(fs: RootFS) -> dict[str, KfdNode]:
    """PCI slot -> kfd node, for every GPU node kfd lists."""
    found: dict[str, KfdNode] = {}
    for node in fs.listdir(KFD_NODES):
        props = _properties(fs.text(f"{KFD_NODES}/{node}/properties", source="amd") or "")
        gfx = gfx_name(props.get("gfx_target_version", 0))
        if gfx is None:
            continue
        slot = _node_slot(fs, props)
        if slot:
            found[slot] = KfdNode(gfx=gfx, cpu_cores=props.get("cpu_cores_count", 0))
    return found


def _node_slot(fs: RootFS, props: dict[str, int]) -> str | None:
    minor = props.get("drm_render_minor")
    if minor:
        render = f"/sys/class/drm/renderD{minor}"
        target = fs.link(render) or render.lstrip("/")
        slot = fs.link_name(f"{target}/device")
        if slot:
            return slot
    location = props.get("location_id")
    if location is None:
        return None
    bus, devfn = location >> 8, location & 0xFF
    return f"{props.get('domain', 0):04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7:x}"


def amd_gpus(fs: RootFS, devices: Sequence[PciDevice]) -> GpuProbe:
    """The probe of AMD GPUs: kfd's topology is read once for all of them (``devices``)."""
    nodes = kfd_nodes(fs)
    return lambda device: amd_facts(fs, device, nodes)


def amd_facts(fs: RootFS, device: PciDevice, nodes: dict[str, KfdNode]) -> GpuPart:
    """VRAM, gfx target and APU-ness of one AMD GPU; warnings for what could not be read."""
    ids = device.ids
    vram = fs.int_value(f"{device.path}/mem_info_vram_total", source="amd", base=10)
    node = nodes.get(ids.slot)
    apu = any(a.device == ids.device_id for a in pci_table().amd_apus)
    if apu or (node is not None and node.cpu_cores > 0):
        integrated: bool | None = True
    elif vram is not None or node is not None:
        integrated = False
    else:
        integrated = None
    if vram is None and not integrated:
        fs.warn(
            "amd",
            f"could not read the VRAM of the AMD GPU at {ids.slot} (no mem_info_vram_total)",
            "load the amdgpu driver (`sudo modprobe amdgpu`, kernel 5.x or newer)",
        )
    if node is None:
        fs.warn(
            "amd",
            f"kfd lists no node for the AMD GPU at {ids.slot}, so its gfx target is unknown",
            "load the amdgpu driver with kfd (ROCm) support and make /dev/kfd accessible",
        )
    return GpuPart(vram=vram, gfx=node.gfx if node else None, integrated=integrated)
