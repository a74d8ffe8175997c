"""Ask the Vulkan loader which devices it sees: ``python -m hwprobe.vulkan_query`` prints JSON.

This is the live source of :mod:`hwprobe.vulkan`, and ``hwprobe capture`` records its output
as ``run/vulkan-devices.json`` so that a replay never runs it. It runs in a child process because
creating a Vulkan instance loads every installed driver (ICD) into the process: a broken driver
may crash or print, and neither may reach the prober or the install hook that runs it.

It talks to ``libvulkan.so.1`` through ctypes (no vulkaninfo, which the snap does not ship) and
reads only what the selector and llama.cpp's Vulkan backend care about: the device type (a CPU
device such as Mesa's lavapipe/llvmpipe or SwiftShader is software, not a GPU), the name, the
vendor/device ids, the driver, the PCI address when the driver reports one, and the device-local
memory computed as ggml-vulkan computes it (every heap of an integrated GPU, otherwise the heaps
flagged device-local). The device ``index`` is the loader's order, the one
``GGML_VK_VISIBLE_DEVICES`` counts in.
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any

# VkStructureType values (vulkan_core.h)
APPLICATION_INFO = 0
INSTANCE_CREATE_INFO = 1
PROPERTIES_2 = 1000059001
DRIVER_PROPERTIES = 1000196000
PCI_BUS_INFO_PROPERTIES = 1000212000
API_VERSION_1_1 = (1 << 22) | (1 << 12)
HEAP_DEVICE_LOCAL = 0x1
INTEGRATED_GPU = 1
DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
PCI_EXTENSION = b"VK_EXT_pci_bus_info"
# VkPhysicalDeviceProperties is 824 bytes on 64-bit Linux; read it into a larger buffer so a
# loader writing more than we declare can never overrun our memory.
PROPS_BYTES = 1024


class ApplicationInfo(ctypes.Structure):
    _fields_ = [
        ("s_type", ctypes.c_int),
        ("p_next", ctypes.c_void_p),
        ("app_name", ctypes.c_char_p),
        ("app_version", ctypes.c_uint32),
        ("engine_name", ctypes.c_char_p),
        ("engine_version", ctypes.c_uint32),
        ("api_version", ctypes.c_uint32),
    ]


class InstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("s_type", ctypes.c_int),
        ("p_next", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("app_info", ctypes.POINTER(ApplicationInfo)),
        ("layer_count", ctypes.c_uint32),
        ("layers", ctypes.c_void_p),
        ("extension_count", ctypes.c_uint32),
        ("extensions", ctypes.c_void_p),
    ]


class DeviceProperties(ctypes.Structure):
    """The leading fields of VkPhysicalDeviceProperties, padded to :data:`PROPS_BYTES`."""

    _fields_ = [
        ("api_version", ctypes.c_uint32),
        ("driver_version", ctypes.c_uint32),
        ("vendor_id", ctypes.c_uint32),
        ("device_id", ctypes.c_uint32),
        ("device_type", ctypes.c_int),
        ("device_name", ctypes.c_char * 256),
        ("rest", ctypes.c_ubyte * (PROPS_BYTES - 276)),
    ]


class Properties2(ctypes.Structure):
    _fields_ = [
        ("s_type", ctypes.c_int),
        ("p_next", ctypes.c_void_p),
        ("properties", DeviceProperties),
    ]


class DriverProperties(ctypes.Structure):
    _fields_ = [
        ("s_type", ctypes.c_int),
        ("p_next", ctypes.c_void_p),
        ("driver_id", ctypes.c_uint32),
        ("driver_name", ctypes.c_char * 256),
        ("driver_info", ctypes.c_char * 256),
        ("conformance", ctypes.c_ubyte * 4),
    ]


class PciBusInfo(ctypes.Structure):
    _fields_ = [
        ("s_type", ctypes.c_int),
        ("p_next", ctypes.c_void_p),
        ("domain", ctypes.c_uint32),
        ("bus", ctypes.c_uint32),
        ("device", ctypes.c_uint32),
        ("function", ctypes.c_uint32),
    ]


class MemoryHeap(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("flags", ctypes.c_uint32)]


class MemoryProperties(ctypes.Structure):
    _fields_ = [
        ("type_count", ctypes.c_uint32),
        ("types", ctypes.c_uint32 * 64),  # 32 x VkMemoryType {flags, heapIndex}
        ("heap_count", ctypes.c_uint32),
        ("heaps", MemoryHeap * 16),
    ]


class ExtensionProperties(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("version", ctypes.c_uint32)]


def _version(value: int) -> str:
    return f"{value >> 22 & 0x7F}.{value >> 12 & 0x3FF}.{value & 0xFFF}"


def _has_pci_info(vk: ctypes.CDLL, device: ctypes.c_void_p) -> bool:
    count = ctypes.c_uint32(0)
    vk.vkEnumerateDeviceExtensionProperties(device, None, ctypes.byref(count), None)
    found = (ExtensionProperties * count.value)()
    vk.vkEnumerateDeviceExtensionProperties(device, None, ctypes.byref(count), found)
    return any(e.name == PCI_EXTENSION for e in found[: count.value])


def _memory(vk: ctypes.CDLL, device: ctypes.c_void_p, integrated: bool) -> int:
    """Device memory as ggml-vulkan's ggml_backend_vk_get_device_memory counts it."""
    mem = MemoryProperties()
    vk.vkGetPhysicalDeviceMemoryProperties(device, ctypes.byref(mem))
    heaps = mem.heaps[: min(mem.heap_count, 16)]
    return sum(h.size for h in heaps if integrated or h.flags & HEAP_DEVICE_LOCAL)


def describe(vk: ctypes.CDLL, device: ctypes.c_void_p, index: int) -> dict[str, Any]:
    """One physical device as plain data (the replay file's entry)."""
    driver = DriverProperties(s_type=DRIVER_PROPERTIES)
    pci = PciBusInfo(s_type=PCI_BUS_INFO_PROPERTIES)
    with_pci = _has_pci_info(vk, device)
    driver.p_next = ctypes.addressof(pci) if with_pci else None
    props2 = Properties2(s_type=PROPERTIES_2, p_next=ctypes.addressof(driver))
    vk.vkGetPhysicalDeviceProperties2(device, ctypes.byref(props2))
    props = props2.properties
    slot = f"{pci.domain:04x}:{pci.bus:02x}:{pci.device:02x}.{pci.function:x}"
    return {
        "index": index,
        "name": props.device_name.decode("utf-8", "replace"),
        "device-type": DEVICE_TYPES.get(props.device_type, "other"),
        "vendor-id": f"0x{props.vendor_id:04x}",
        "device-id": f"0x{props.device_id:04x}",
        "api-version": _version(props.api_version),
        "driver-id": driver.driver_id,
        "driver-name": driver.driver_name.decode("utf-8", "replace") or None,
        "driver-info": driver.driver_info.decode("utf-8", "replace") or None,
        "memory": _memory(vk, device, props.device_type == INTEGRATED_GPU),
        "pci-slot": slot if with_pci else None,
    }


def query() -> dict[str, Any]:
    """Every physical device the loader enumerates, or the reason there are none."""
    try:
        vk = ctypes.CDLL("libvulkan.so.1")
    except OSError as exc:
        return {"error": f"no Vulkan loader: {exc}"}
    app = ApplicationInfo(s_type=APPLICATION_INFO, app_name=b"hwprobe", api_version=API_VERSION_1_1)
    info = InstanceCreateInfo(s_type=INSTANCE_CREATE_INFO, app_info=ctypes.pointer(app))
    instance = ctypes.c_void_p()
    result = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if result != 0:
        return {"error": f"vkCreateInstance failed with VkResult {result} (no usable driver)"}
    try:
        count = ctypes.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * count.value)()
        vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        devices = [describe(vk, ctypes.c_void_p(h), i) for i, h in enumerate(handles)]
    finally:
        vk.vkDestroyInstance(instance, None)
    return {"devices": devices}


def main() -> None:
    """Print :func:`query`'s answer as JSON on stdout."""
    sys.stdout.write(json.dumps(query(), indent=2) + "\n")


if __name__ == "__main__":
    main()
