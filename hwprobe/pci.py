"""PCI devices from ``sys/bus/pci/devices/*``, sorted into GPUs, NPUs and displays by the table.

sysfs ids are read as integers (captures store 32-bit forms like ``0x00030000``) and reported as
lowercase hex strings. Whether a device is a GPU is a fact about its vendor, not its class: a
server's only "VGA" device is often a BMC chip (ASPEED, Matrox) that can run no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hwprobe._fs import RootFS
from hwprobe.profile import DisplayFacts, PciIds
from hwprobe.tables import DeviceEntry, VendorEntry, known_device, pci_table

PCI_DEVICES = "/sys/bus/pci/devices"
Role = Literal["gpu", "npu", "display"]


@dataclass(frozen=True)
class PciDevice:
    """One PCI function and where its sysfs directory is (relative to the root)."""

    ids: PciIds
    path: str


@dataclass(frozen=True)
class Classified:
    """A PCI device the table says is a GPU, an NPU or a display, with what the table knows."""

    role: Role
    device: PciDevice
    vendor: VendorEntry | None
    entry: DeviceEntry | None

    @property
    def vendor_name(self) -> str:
        """The vendor as hwprobe reports it ("nvidia"), or the raw id when the table lacks it."""
        return self.vendor.name if self.vendor else self.device.ids.vendor_id


@dataclass(frozen=True)
class PciScan:
    """Every PCI function, and whether the capture recorded driver links at all."""

    devices: tuple[PciDevice, ...]
    drivers_recorded: bool


def _hex(value: int | None, width: int) -> str | None:
    return None if value is None else f"0x{value:0{width}x}"


def read_device(fs: RootFS, slot: str) -> PciDevice | None:
    """The ids of one PCI function; None when its class or vendor cannot be read."""
    path = f"{PCI_DEVICES}/{slot}"

    def number(name: str) -> int | None:
        return fs.int_value(f"{path}/{name}", source="pci", base=16)

    klass, vendor, device = number("class"), number("vendor"), number("device")
    if klass is None or vendor is None or device is None:
        return None
    numa = fs.int_value(f"{path}/numa_node", source="pci", base=10)
    ids = PciIds(
        slot=slot,
        pci_class=f"0x{(klass >> 8) & 0xFFFF:04x}",
        vendor_id=f"0x{vendor & 0xFFFF:04x}",
        device_id=f"0x{device & 0xFFFF:04x}",
        subsystem_vendor_id=_hex(number("subsystem_vendor"), 4),
        subsystem_device_id=_hex(number("subsystem_device"), 4),
        revision=_hex(number("revision"), 2),
        driver=fs.link_name(f"{path}/driver"),
        numa_node=numa if numa is not None and numa >= 0 else None,
    )
    return PciDevice(ids=ids, path=path)


def scan_pci(fs: RootFS) -> PciScan | None:
    """Every PCI function under the root; None (and a warning) when there is no PCI bus."""
    if not fs.is_dir(PCI_DEVICES):
        fs.warn(
            "pci",
            f"no PCI bus at {fs.path(PCI_DEVICES)}, so GPUs and NPUs are unknown "
            "(a container or VM without /sys?)",
            "run hwprobe on the host, or give the container read access to /sys",
        )
        return None
    devices = tuple(d for slot in fs.listdir(PCI_DEVICES) if (d := read_device(fs, slot)))
    return PciScan(devices=devices, drivers_recorded=any(d.ids.driver for d in devices))


def classify(device: PciDevice) -> Classified | None:
    """GPU, NPU or display by the table; None for everything else (bridges, USB, audio...)."""
    table = pci_table()
    ids = device.ids
    vendor = table.vendors.get(ids.vendor_id)
    entry = known_device(ids.vendor_id, ids.device_id)
    if entry is not None and entry.kind is not None:
        return Classified(entry.kind, device, vendor, entry)
    role = table.classes.get(ids.pci_class)
    if role == "accelerator":
        return Classified("npu", device, vendor, entry)
    if role == "display":
        gpu = vendor is not None and vendor.gpu
        return Classified("gpu" if gpu else "display", device, vendor, entry)
    return None


def display_facts(item: Classified) -> DisplayFacts:
    """A display device that runs no model, and why."""
    if item.vendor is not None and item.vendor.reason:
        reason = item.vendor.reason
    else:
        reason = f"vendor {item.device.ids.vendor_id} is not known to run models"
    return DisplayFacts(
        vendor=item.vendor_name,
        name=item.entry.name if item.entry else None,
        pci=item.device.ids,
        reason=reason,
    )


def render_nodes(fs: RootFS) -> dict[str, tuple[str, ...]]:
    """PCI slot -> its ``/dev/dri/renderD*`` nodes, through ``sys/class/drm/renderD*/device``."""
    nodes: dict[str, list[str]] = {}
    for name in fs.listdir("/sys/class/drm"):
        if not name.startswith("renderD"):
            continue
        target = fs.link(f"/sys/class/drm/{name}") or f"sys/class/drm/{name}"
        slot = fs.link_name(f"{target}/device")
        if slot:
            nodes.setdefault(slot, []).append(f"/dev/dri/{name}")
    return {slot: tuple(found) for slot, found in nodes.items()}
