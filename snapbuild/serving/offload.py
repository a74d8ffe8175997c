"""Which device a GPU engine's llama-server computes on: the selector's GPU, in the backend's terms.

The selector picks one GPU by its PCI address (``Selected.slot``); llama.cpp's backends count
devices their own way. The catalog's ``offload`` entry says how (``runtimes/catalog.yaml``):
CUDA and ROCm count the vendor's GPUs in PCI order (CUDA once ``CUDA_DEVICE_ORDER=PCI_BUS_ID``),
Vulkan counts the Vulkan loader's devices, which hwprobe lists with their PCI address or ids.
The backend's visible-devices variable then leaves it that one device, llama.cpp's
``<Name>0``. Without it a two-GPU machine would have its layers split over both GPUs, against a
memory plan made for one.

A forced Vulkan engine on a machine without a GPU (``use-engine vulkan --force``) runs on the
software Vulkan device (lavapipe): ggml-vulkan ignores CPU-type devices unless
``GGML_VK_VISIBLE_DEVICES`` names them, so this is also what makes that override work.
"""

from __future__ import annotations

from hwprobe.profile import HostProfile, VulkanDeviceFacts
from runtimes.catalog import Offload, load_catalog
from runtimes.llamaserver.offload import DeviceChoice
from snapbuild.selection.decision import Selected


def device_choice(
    runtime: str, selected: Selected, host: HostProfile | None
) -> DeviceChoice | None:
    """The device ``selected`` (a GPU engine of ``runtime``) must use; None for other engines."""
    entry = load_catalog().get(runtime)
    if entry is None or entry.offload is None or selected.device != "gpu":
        return None
    offload = entry.offload
    if offload.device_order == "pci":
        index, why = _pci_index(entry.gpu_vendors, selected.slot, host)
    else:
        index, why = _vulkan_index(selected.slot, host)
    env = dict(offload.environment)
    if index is not None:
        env[offload.visible_devices] = str(index)
    return DeviceChoice(
        backend=offload.backend,
        device=f"{offload.device_name}0",
        env=tuple(sorted(env.items())),
        why=why or _default(offload),
    )


def _default(offload: Offload) -> str:
    return f"the {offload.backend} backend's own first device (the chosen GPU is not identified)"


def _pci_index(
    vendors: tuple[str, ...], slot: str | None, host: HostProfile | None
) -> tuple[int | None, str]:
    """The rank of ``slot`` among the host's GPUs of ``vendors`` in PCI order."""
    if slot is None or host is None:
        return None, ""
    slots = sorted(g.pci.slot for g in host.gpus if g.pci and g.vendor in vendors)
    if slot not in slots:
        return None, ""
    return slots.index(slot), f"the GPU at {slot} (device {slots.index(slot)} in PCI order)"


def _vulkan_index(slot: str | None, host: HostProfile | None) -> tuple[int | None, str]:
    """The Vulkan device of the GPU at ``slot``, or the software device when there is no GPU."""
    devices = host.vulkan.devices if host and host.vulkan else None
    if not devices:
        return None, ""
    if slot is None:  # forced on a machine without a GPU: the software device
        found = next((d for d in devices if d.software), None)
        return (found.index, _label(found, "software, on the CPU")) if found else (None, "")
    match = [d for d in devices if d.pci_slot == slot]
    if not match and host is not None:  # drivers without VK_EXT_pci_bus_info: by PCI ids
        gpu = next((g for g in host.gpus if g.pci and g.pci.slot == slot), None)
        if gpu is not None and gpu.pci is not None:
            ids = (gpu.pci.vendor_id, gpu.pci.device_id)
            match = [d for d in devices if (d.vendor_id, d.device_id) == ids and not d.software]
    if len(match) != 1:
        return None, ""
    return match[0].index, _label(match[0], f"the GPU at {slot}")


def _label(device: VulkanDeviceFacts, what: str) -> str:
    return f"{device.name} (Vulkan device {device.index}: {what})"
