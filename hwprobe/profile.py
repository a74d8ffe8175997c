"""The HostProfile: the data contract between the prober and everything that consumes it.

Selection, packaging, fleet planning and the snap's install hook all read this model, and fleet
operators store it as JSON, so it is versioned (``schema-version``), frozen, rejects unknown keys
and serializes with kebab-case keys. ``None`` always means *unknown*, never *no*: a GPU whose
memory could not be read has ``vram: null`` and a warning says why.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from snapcommon.plain import Kebab, kebab

if TYPE_CHECKING:
    from pydantic import TypeAdapter

SCHEMA_VERSION = 1

X86Level = Literal["x86-64-v1", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
DeviceKind = Literal["cpu", "gpu", "npu"]
VulkanDeviceType = Literal["discrete-gpu", "integrated-gpu", "virtual-gpu", "cpu", "other"]

__all__ = [
    "SCHEMA_VERSION",
    "CpuFacts",
    "DeviceKind",
    "DiskFacts",
    "DisplayFacts",
    "GpuFacts",
    "HostProfile",
    "MemoryFacts",
    "NpuFacts",
    "PciIds",
    "ProbeWarning",
    "RuntimeFacts",
    "VulkanDeviceFacts",
    "VulkanDriverFacts",
    "VulkanFacts",
    "X86Level",
    "kebab",
]


@dataclass(frozen=True, kw_only=True)
class CpuFacts(Kebab):
    """One kind of core. Hybrid CPUs (P-cores and E-cores) give one entry per distinct kind."""

    architecture: str  # snap architecture names: amd64, arm64, armhf, riscv64, s390x, ppc64el, i386
    vendor: str | None = None  # "GenuineIntel", "AuthenticAMD", "ARM", "Ampere", "SiFive"...
    model_name: str | None = None
    flags: tuple[str, ...] = ()  # x86 flags, or arm64 "Features", sorted
    x86_64_level: X86Level | None = None
    arm64_implementer: str | None = None  # "0x41"
    arm64_part: str | None = None  # "0xd0b"
    arm64_features: tuple[str, ...] = ()  # the LLM-relevant subset: asimd, sve, sve2, i8mm...
    riscv_isa: str | None = None  # "rv64imafdch_zicsr_..."
    threads: int | None = None  # logical CPUs of this kind
    cores: int | None = None  # physical cores of this kind, when known


@dataclass(frozen=True, kw_only=True)
class MemoryFacts(Kebab):
    """System RAM in bytes, from /proc/meminfo."""

    total: int | None = None
    available: int | None = None
    swap_total: int | None = None
    swap_free: int | None = None


@dataclass(frozen=True, kw_only=True)
class DiskFacts(Kebab):
    """Free and total bytes of the filesystem holding ``path`` (where snaps are stored)."""

    path: str
    total: int | None = None
    free: int | None = None


@dataclass(frozen=True, kw_only=True)
class PciIds(Kebab):
    """The identity of one PCI function, as sysfs tells it (lowercase hex strings like "0x10de")."""

    slot: str  # "0000:01:00.0"
    pci_class: str  # "0x0300" (class and subclass)
    vendor_id: str
    device_id: str
    subsystem_vendor_id: str | None = None
    subsystem_device_id: str | None = None
    revision: str | None = None
    driver: str | None = None  # bound kernel driver, None when unknown or unbound
    numa_node: int | None = None


@dataclass(frozen=True, kw_only=True)
class GpuFacts(Kebab):
    """A GPU that can run models."""

    vendor: str  # "nvidia", "amd", "intel", "apple", "qualcomm", ...
    name: str | None = None
    pci: PciIds | None = None
    integrated: bool | None = None  # iGPU/APU sharing system RAM
    unified_memory: bool = False  # the GPU addresses system RAM as its own (APUs, iGPUs)
    vram: int | None = None  # bytes of dedicated memory; None when unknown
    vram_free: int | None = None
    # Integrated GPUs: bytes of system RAM the driver lets the GPU address (OpenCL's global
    # memory), None when unknown. Not VRAM: it is the same RAM the CPU and the model share.
    shared_memory: int | None = None
    compute_capability: str | None = None  # NVIDIA, "8.9"
    gfx: str | None = None  # AMD, "gfx1032"
    driver_version: str | None = None
    cuda_version: str | None = None  # highest CUDA the driver supports, "12.4"
    device_nodes: tuple[str, ...] = ()  # "/dev/dri/renderD128", "/dev/nvidia0"


@dataclass(frozen=True, kw_only=True)
class NpuFacts(Kebab):
    """An NPU or other AI accelerator (PCI class 0x1200 or 0x0b40, or a known NPU device)."""

    vendor: str
    name: str | None = None
    pci: PciIds | None = None
    driver: str | None = None  # the kernel driver that should bind it ("intel_vpu", "amdxdna")
    driver_loaded: bool | None = None  # None: could not tell
    device_nodes: tuple[str, ...] = ()  # "/dev/accel/accel0"
    runtimes: tuple[str, ...] = ()  # runtime families that can drive it for LLMs
    llm_capable: bool = False  # False for accelerators that run vision models but no LLM
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class DisplayFacts(Kebab):
    """A display device that cannot run models (BMC/server video), listed so nobody wonders."""

    vendor: str
    name: str | None = None
    pci: PciIds | None = None
    reason: str


@dataclass(frozen=True, kw_only=True)
class VulkanDriverFacts(Kebab):
    """One installed Vulkan driver: an ICD manifest the Vulkan loader would read."""

    manifest: str  # the manifest's path on the machine
    library: str | None = None  # its ``library_path``
    api_version: str | None = None
    # a driver that renders on the CPU (Mesa's lavapipe, SwiftShader): hwprobe/data/vulkan.yaml
    software: bool = False


@dataclass(frozen=True, kw_only=True)
class VulkanDeviceFacts(Kebab):
    """One Vulkan physical device, as the loader enumerates it.

    A device of type ``cpu`` (lavapipe/llvmpipe, SwiftShader) is software running on the CPU:
    ``software`` is true and it is never listed among the GPUs.
    """

    index: int  # the loader's order: what GGML_VK_VISIBLE_DEVICES counts in
    name: str
    device_type: VulkanDeviceType
    software: bool
    vendor_id: str  # "0x10de"; Mesa's software devices use Khronos ids such as "0x10005"
    device_id: str
    api_version: str | None = None
    driver_name: str | None = None
    driver_info: str | None = None
    memory: int | None = None  # bytes, counted as llama.cpp's Vulkan backend counts them
    pci_slot: str | None = None  # "0000:01:00.0" when the driver reports it (VK_EXT_pci_bus_info)


@dataclass(frozen=True, kw_only=True)
class VulkanFacts(Kebab):
    """The Vulkan drivers installed and the devices they expose."""

    drivers: tuple[VulkanDriverFacts, ...] = ()
    devices: tuple[VulkanDeviceFacts, ...] | None = None  # None: not enumerated here

    @property
    def software_devices(self) -> tuple[VulkanDeviceFacts, ...]:
        """The devices that run on the CPU."""
        return tuple(d for d in self.devices or () if d.software)


@dataclass(frozen=True, kw_only=True)
class ProbeWarning(Kebab):
    """Something a probe could not read, and how to fix it."""

    source: str  # "cpu", "memory", "disk", "pci", "nvml", "amd", "intel", "npu", "vulkan"...
    message: str
    resolution: str | None = None


@dataclass(frozen=True, kw_only=True)
class RuntimeFacts(Kebab):
    """Which runtimes work here. Slow to gather (imports), so only on request."""

    packages: dict[str, str | None] = field(
        default_factory=dict
    )  # package -> version, None when it does not import
    openvino_devices: tuple[str, ...] = ()
    onnxruntime_providers: tuple[str, ...] = ()
    llama_cpp_gpu_offload: bool | None = None


@dataclass(frozen=True, kw_only=True)
class HostProfile(Kebab):
    """Everything the selector needs to know about one machine."""

    schema_version: int = SCHEMA_VERSION
    hostname: str | None = None
    cpus: tuple[CpuFacts, ...] = ()
    memory: MemoryFacts = MemoryFacts()
    disk: DiskFacts | None = None
    gpus: tuple[GpuFacts, ...] = ()
    npus: tuple[NpuFacts, ...] = ()
    displays: tuple[DisplayFacts, ...] = ()
    vulkan: VulkanFacts | None = None  # None: no Vulkan driver or record found
    runtimes: RuntimeFacts | None = None
    warnings: tuple[ProbeWarning, ...] = ()

    # Convenience views for the selector: what every core can run.
    @property
    def architecture(self) -> str | None:
        """The machine's architecture (snap naming), None when no CPU could be read."""
        return self.cpus[0].architecture if self.cpus else None

    @property
    def cpu_flags(self) -> frozenset[str]:
        """Flags common to every kind of core: code built for these runs on any core."""
        if not self.cpus:
            return frozenset()
        common = set(self.cpus[0].flags)
        for cpu in self.cpus[1:]:
            common &= set(cpu.flags)
        return frozenset(common)

    @property
    def x86_64_level(self) -> X86Level | None:
        """The lowest x86-64 level over all kinds of core."""
        levels = [c.x86_64_level for c in self.cpus if c.x86_64_level]
        return min(levels) if levels and len(levels) == len(self.cpus) else None

    @property
    def threads(self) -> int | None:
        """Logical CPUs in total, None when unknown."""
        counts = [c.threads for c in self.cpus if c.threads is not None]
        return sum(counts) if counts and len(counts) == len(self.cpus) else None

    def to_json(self, *, indent: int | None = 2) -> str:
        """The profile as JSON with kebab-case keys (what ``hwprobe --json`` prints)."""
        return json.dumps(self.to_data(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> HostProfile:
        """Load and strictly validate a profile written by :meth:`to_json` (raises pydantic's
        ValidationError, a ValueError: unknown keys, wrong types, bad values)."""
        return _adapter().validate_json(text)

    @classmethod
    def from_data(cls, data: Any) -> HostProfile:
        """Strictly validate parsed JSON/YAML (kebab-case keys) into a profile, as
        :meth:`from_json` does; raises pydantic's ValidationError."""
        return _adapter().validate_python(data)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of the profile as written on disk (kebab-case keys)."""
        return _adapter().json_schema(by_alias=True)


@functools.cache
def _adapter() -> TypeAdapter[HostProfile]:
    """Pydantic's validator for the profile, built on first use: only readers pay for pydantic."""
    from pydantic import TypeAdapter

    return TypeAdapter(HostProfile)


def error_message(error: Any) -> str:
    """One of pydantic's validation errors (an ``exc.errors()`` item) on a profile, worded as it
    was when the profile was a pydantic model, so messages users and tests know stay the same."""
    if error["type"] == "unexpected_keyword_argument":
        return "Extra inputs are not permitted"
    if error["type"] == "dataclass_type":
        return f"Input should be a valid dictionary or instance of {error['ctx']['class_name']}"
    return str(error["msg"])
