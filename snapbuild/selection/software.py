"""Software Vulkan devices (lavapipe, SwiftShader): the CPU in a GPU's clothes, never a GPU.

hwprobe lists them under ``vulkan`` and never among the GPUs, so a Vulkan engine on a machine
whose only Vulkan device is software finds no GPU and is rejected: llama.cpp's own CPU backend
does the same work faster, so ranking it above a CPU engine would be wrong. The rejection still
names the software device and keeps it as the engine's device, so that the memory fit is judged
against what that device reports: an operator who forces the engine (``use-engine vulkan
--force``) gets a plan made for it, and :mod:`snapbuild.serving.offload` points llama-server at it.
"""

from __future__ import annotations

from hwprobe.profile import HostProfile, VulkanDeviceFacts
from runtimes.catalog import RuntimeEntry


def software_vulkan(host: HostProfile, entry: RuntimeEntry) -> VulkanDeviceFacts | None:
    """The software Vulkan device a Vulkan runtime would reach here (None: not Vulkan, or none)."""
    if entry.offload is None or entry.offload.backend != "vulkan" or host.vulkan is None:
        return None
    return next(iter(host.vulkan.software_devices), None)


def software_reason(device: VulkanDeviceFacts, engine: str) -> str:
    """Why the software device does not count, and how to run on it anyway."""
    return (
        f"; {device.name} is a software Vulkan device that runs on the CPU, not a GPU (the CPU "
        f"engines do the same work faster; `use-engine {engine} --force` runs it there anyway)"
    )
