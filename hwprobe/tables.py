"""The prober's data tables (``hwprobe/data/*.yaml``), loaded lazily.

Hardware knowledge lives in YAML so that adding a GPU or an NPU is a one-line data change. The
classes below are the tables' schema: frozen dataclasses (no pydantic at run time, see
:mod:`snapcommon.plain`) built from the YAML without checks when the prober needs them, and
validated strictly by :func:`validate_table` (types, unknown keys, hex ids), which the tests run
on every shipped table, so a malformed entry fails there instead of misclassifying a machine.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from snapcommon.plain import Kebab, build

HEX_ID = re.compile(r"^0x[0-9a-f]{4}$")
HEX_ANY = re.compile(r"^0x[0-9a-f]+$")


def _check_hex(where: str, value: object, pattern: re.Pattern[str] = HEX_ID) -> None:
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"{where}: {value!r} is not a lowercase hex id like 0x10de")


@dataclass(frozen=True, kw_only=True)
class VendorEntry(Kebab):
    """A PCI vendor: the name hwprobe reports and whether its display devices run models."""

    name: str
    label: str
    gpu: bool
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class DeviceEntry(Kebab):
    """A known PCI device: a name, and for accelerators what drives them."""

    vendor: str
    device: str
    name: str
    kind: Literal["gpu", "npu"] | None = None
    driver: str | None = None
    runtimes: tuple[str, ...] = ()
    llm_capable: bool | None = None
    note: str | None = None


@dataclass(frozen=True, kw_only=True)
class IdRange(Kebab):
    """An inclusive range of PCI device ids."""

    first: str
    last: str
    family: str

    def contains(self, device_id: str) -> bool:
        """True when ``device_id`` ("0x56a2") lies in the range."""
        return int(self.first, 16) <= int(device_id, 16) <= int(self.last, 16)


@dataclass(frozen=True, kw_only=True)
class ApuEntry(Kebab):
    """An AMD APU's GPU device id."""

    device: str
    family: str


@dataclass(frozen=True, kw_only=True)
class PciTable(Kebab):
    """``data/pci.yaml``."""

    schema_version: Literal[1]
    classes: dict[str, Literal["display", "accelerator"]]
    vendors: dict[str, VendorEntry]
    devices: tuple[DeviceEntry, ...]
    intel_discrete_ranges: tuple[IdRange, ...]
    intel_local_memory_files: tuple[str, ...]
    amd_apus: tuple[ApuEntry, ...]


@dataclass(frozen=True, kw_only=True)
class X86Level(Kebab):
    """One x86-64 micro-architecture level and the cpuinfo flags it adds."""

    level: Literal["x86-64-v1", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
    flags: tuple[str, ...]  # at least one (validate_table checks)


@dataclass(frozen=True, kw_only=True)
class CpuTable(Kebab):
    """``data/cpu.yaml``."""

    schema_version: Literal[1]
    architectures: dict[str, str]
    x86_64_levels: tuple[X86Level, ...]
    arm64_implementers: dict[str, str]
    arm64_parts: dict[str, dict[str, str]]
    arm64_llm_features: dict[str, str]
    riscv_vendors: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class NvmlErrorEntry(Kebab):
    """What one NVML error means for a person."""

    message: str
    resolution: str


@dataclass(frozen=True, kw_only=True)
class NvmlTable(Kebab):
    """``data/nvml.yaml``."""

    schema_version: Literal[1]
    errors: dict[str, NvmlErrorEntry]
    fallback: NvmlErrorEntry


@dataclass(frozen=True, kw_only=True)
class VulkanTable(Kebab):
    """``data/vulkan.yaml``."""

    schema_version: Literal[1]
    software_libraries: dict[str, str]
    software_driver_ids: dict[int, str]
    icd_directories: tuple[str, ...]


def load_yaml(name: str) -> Any:
    """Parse one of the package's data files (the C loader when PyYAML has it: startup matters)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = resources.files("hwprobe").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader


@functools.cache
def pci_table() -> PciTable:
    """The PCI table, loaded on first use."""
    return build(PciTable, load_yaml("pci.yaml"))


@functools.cache
def cpu_table() -> CpuTable:
    """The CPU table, loaded on first use."""
    return build(CpuTable, load_yaml("cpu.yaml"))


@functools.cache
def nvml_table() -> NvmlTable:
    """The NVML error table, loaded on first use."""
    return build(NvmlTable, load_yaml("nvml.yaml"))


@functools.cache
def vulkan_table() -> VulkanTable:
    """The Vulkan table, loaded on first use."""
    return build(VulkanTable, load_yaml("vulkan.yaml"))


@functools.cache
def _device_index() -> dict[tuple[str, str], DeviceEntry]:
    return {(d.vendor, d.device): d for d in pci_table().devices}


def known_device(vendor_id: str, device_id: str) -> DeviceEntry | None:
    """The table's entry for one PCI device, None when the table does not know it."""
    return _device_index().get((vendor_id, device_id))


TABLES: dict[str, type[Kebab]] = {
    "pci": PciTable,
    "cpu": CpuTable,
    "nvml": NvmlTable,
    "vulkan": VulkanTable,
}


def validate_table(name: str, data: Any) -> Kebab:
    """Strictly validate parsed table ``name`` ("pci", "cpu", "nvml", "vulkan"): the schema's
    types and keys (pydantic, imported here only), then the id and path formats the prober
    compares against.

    Raises ValueError (pydantic's ValidationError is one) saying what is wrong and where.
    """
    from pydantic import TypeAdapter

    table = TypeAdapter(TABLES[name]).validate_python(data)
    if isinstance(table, PciTable):
        _check_pci(table)
    elif isinstance(table, CpuTable):
        _check_cpu(table)
    elif isinstance(table, VulkanTable):
        _check_vulkan(table)
    return table


def _check_pci(table: PciTable) -> None:
    for key in table.classes:
        _check_hex("pci.yaml classes", key)
    for key in table.vendors:
        _check_hex("pci.yaml vendors", key)
    for i, entry in enumerate(table.devices):
        _check_hex(f"pci.yaml devices[{i}].vendor", entry.vendor)
        _check_hex(f"pci.yaml devices[{i}].device", entry.device)
    for i, span in enumerate(table.intel_discrete_ranges):
        _check_hex(f"pci.yaml intel-discrete-ranges[{i}].first", span.first)
        _check_hex(f"pci.yaml intel-discrete-ranges[{i}].last", span.last)
    for i, apu in enumerate(table.amd_apus):
        _check_hex(f"pci.yaml amd-apus[{i}].device", apu.device)


def _check_cpu(table: CpuTable) -> None:
    for field in ("arm64_implementers", "riscv_vendors", "arm64_parts"):
        for key in getattr(table, field):
            _check_hex(f"cpu.yaml {field.replace('_', '-')}", key, HEX_ANY)
    for entry in table.x86_64_levels:
        if not entry.flags:
            raise ValueError(
                f"cpu.yaml x86-64-levels: {entry.level} lists no flags; give the cpuinfo flags "
                "that level adds"
            )


def _check_vulkan(table: VulkanTable) -> None:
    for name in table.software_libraries:
        if "/" in name or not name.startswith("lib"):
            raise ValueError(f"vulkan.yaml software-libraries: {name!r} is not a library file name")
    for path in table.icd_directories:
        if not path.startswith("/") or not path.endswith("/vulkan/icd.d"):
            raise ValueError(f"vulkan.yaml icd-directories: {path!r} is not /.../vulkan/icd.d")
