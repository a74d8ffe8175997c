"""The prober's data tables (``hwprobe/data/*.yaml``), loaded lazily and validated once.

Hardware knowledge lives in YAML so that adding a GPU or an NPU is a one-line data change; these
models are the tables' schema, so a malformed entry fails loudly at load time (and in
``tests/test_hwprobe_tables.py``) instead of misclassifying a machine.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any, Literal

from pydantic import Field, field_validator

from hwprobe.profile import KebabModel

HEX_ID = re.compile(r"^0x[0-9a-f]{4}$")
HEX_ANY = re.compile(r"^0x[0-9a-f]+$")


def _check_hex(value: str, pattern: re.Pattern[str] = HEX_ID) -> str:
    if not pattern.match(value):
        raise ValueError(f"{value!r} is not a lowercase hex id like 0x10de")
    return value


class VendorEntry(KebabModel):
    """A PCI vendor: the name hwprobe reports and whether its display devices run models."""

    name: str
    label: str
    gpu: bool
    reason: str | None = None


class DeviceEntry(KebabModel):
    """A known PCI device: a name, and for accelerators what drives them."""

    vendor: str
    device: str
    name: str
    kind: Literal["gpu", "npu"] | None = None
    driver: str | None = None
    runtimes: tuple[str, ...] = ()
    llm_capable: bool | None = None
    note: str | None = None

    @field_validator("vendor", "device")
    @classmethod
    def _hex(cls, value: str) -> str:
        return _check_hex(value)


class IdRange(KebabModel):
    """An inclusive range of PCI device ids."""

    first: str
    last: str
    family: str

    @field_validator("first", "last")
    @classmethod
    def _hex(cls, value: str) -> str:
        return _check_hex(value)

    def contains(self, device_id: str) -> bool:
        """True when ``device_id`` ("0x56a2") lies in the range."""
        return int(self.first, 16) <= int(device_id, 16) <= int(self.last, 16)


class ApuEntry(KebabModel):
    """An AMD APU's GPU device id."""

    device: str
    family: str

    @field_validator("device")
    @classmethod
    def _hex(cls, value: str) -> str:
        return _check_hex(value)


class PciTable(KebabModel):
    """``data/pci.yaml``."""

    schema_version: Literal[1]
    classes: dict[str, Literal["display", "accelerator"]]
    vendors: dict[str, VendorEntry]
    devices: tuple[DeviceEntry, ...]
    intel_discrete_ranges: tuple[IdRange, ...]
    intel_local_memory_files: tuple[str, ...]
    amd_apus: tuple[ApuEntry, ...]

    @field_validator("classes", "vendors")
    @classmethod
    def _hex_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            _check_hex(key)
        return value


class X86Level(KebabModel):
    """One x86-64 micro-architecture level and the cpuinfo flags it adds."""

    level: Literal["x86-64-v1", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
    flags: tuple[str, ...] = Field(min_length=1)


class CpuTable(KebabModel):
    """``data/cpu.yaml``."""

    schema_version: Literal[1]
    architectures: dict[str, str]
    x86_64_levels: tuple[X86Level, ...]
    arm64_implementers: dict[str, str]
    arm64_parts: dict[str, dict[str, str]]
    arm64_llm_features: dict[str, str]
    riscv_vendors: dict[str, str]

    @field_validator("arm64_implementers", "riscv_vendors", "arm64_parts")
    @classmethod
    def _hex_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            _check_hex(key, HEX_ANY)
        return value


class NvmlErrorEntry(KebabModel):
    """What one NVML error means for a person."""

    message: str
    resolution: str


class NvmlTable(KebabModel):
    """``data/nvml.yaml``."""

    schema_version: Literal[1]
    errors: dict[str, NvmlErrorEntry]
    fallback: NvmlErrorEntry


def load_yaml(name: str) -> Any:
    """Parse one of the package's data files (the C loader when PyYAML has it: startup matters)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = resources.files("hwprobe").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader


@functools.cache
def pci_table() -> PciTable:
    """The PCI table, loaded on first use."""
    return PciTable.model_validate(load_yaml("pci.yaml"))


@functools.cache
def cpu_table() -> CpuTable:
    """The CPU table, loaded on first use."""
    return CpuTable.model_validate(load_yaml("cpu.yaml"))


@functools.cache
def nvml_table() -> NvmlTable:
    """The NVML error table, loaded on first use."""
    return NvmlTable.model_validate(load_yaml("nvml.yaml"))


@functools.cache
def _device_index() -> dict[tuple[str, str], DeviceEntry]:
    return {(d.vendor, d.device): d for d in pci_table().devices}


def known_device(vendor_id: str, device_id: str) -> DeviceEntry | None:
    """The table's entry for one PCI device, None when the table does not know it."""
    return _device_index().get((vendor_id, device_id))
