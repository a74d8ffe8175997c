"""What the selector knows about hardware beyond a probe: ``snapbuild/data/hardware.yaml``, typed.

The tables are data so that a GPU's bandwidth or a vendor's name is a reviewed data change next
to its source comment, not code. These models are the file's schema: a misspelt key, a missing
fallback or a bandwidth that is not a number fails when the file is loaded (once, cached) rather
than as a KeyError in the middle of a selection. ``tests/test_selector_data.py`` checks that
code and data agree (the accelerator classes, every catalog runtime and vendor, the ladders).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated, Literal, get_args

import yaml
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from snapcommon.model import KebabModel

# Where an engine runs, as the ranking tells them apart. The data orders them and names them.
Accel = Literal["gpu-discrete", "gpu-integrated", "npu", "cpu"]

Efficiency = Annotated[float, Field(gt=0, le=1)]


class AcceleratorClass(KebabModel):
    """One accelerator class: its id in code and how a ``why`` text names it."""

    id: Accel
    label: str


class Bandwidth(KebabModel):
    """Memory bandwidth in bytes/s: decode is bandwidth-bound, so this estimates tokens/s."""

    cpu_by_architecture: dict[str, PositiveFloat]
    cpu_by_arm64_part: dict[str, PositiveFloat]  # "implementer:part" from /proc/cpuinfo
    gpu_by_vendor: dict[str, PositiveFloat]  # must hold "other", the fallback
    gpu_by_device: dict[str, PositiveFloat]  # "vendor:device" PCI ids


class UnsupportedGpu(KebabModel):
    """GPUs too old for every GPU runtime here: a PCI device-id prefix and the reason shown."""

    prefix: str
    reason: str


class FlagLadders(KebabModel):
    """Instruction-set extensions, best first, to name the best one a CPU has."""

    x86: tuple[str, ...]
    arm64: tuple[str, ...]


class HardwareTable(KebabModel):
    """The whole of ``hardware.yaml``."""

    schema_version: Literal[1]
    accelerator_classes: tuple[AcceleratorClass, ...]  # best first
    sufficient_tokens_per_second: PositiveFloat
    bandwidth: Bandwidth
    nominal_vram: dict[str, PositiveInt]
    # runtime id -> device vendor (or "default") -> share of the bandwidth turned into tokens
    runtime_efficiency: dict[str, dict[str, Efficiency]]
    unsupported_gpus: dict[str, tuple[UnsupportedGpu, ...]]
    npu_driver_hints: dict[str, str]
    vendor_names: dict[str, str]
    flag_ladders: FlagLadders

    @model_validator(mode="after")
    def _complete(self) -> HardwareTable:
        """The fallbacks the code relies on are present, and every class is ranked once."""
        ids = [c.id for c in self.accelerator_classes]
        if sorted(ids) != sorted(get_args(Accel)):
            raise ValueError(f"accelerator-classes must list each of {get_args(Accel)} once")
        if "other" not in self.bandwidth.gpu_by_vendor:
            raise ValueError("bandwidth.gpu-by-vendor needs an 'other' entry (the fallback)")
        lacking = [r for r, e in self.runtime_efficiency.items() if "default" not in e]
        if lacking:
            raise ValueError(f"runtime-efficiency of {', '.join(lacking)} lacks a 'default'")
        return self

    def accel_rank(self, accel: Accel) -> int:
        """Position of an accelerator class, best first."""
        return [c.id for c in self.accelerator_classes].index(accel)

    def accel_label(self, accel: Accel) -> str:
        """How a ``why`` text names an accelerator class."""
        return next(c.label for c in self.accelerator_classes if c.id == accel)

    def vendor_name(self, vendor: str | None) -> str:
        """How messages name a vendor id ("nvidia" -> "NVIDIA"); an unknown id as itself."""
        return self.vendor_names.get(vendor or "", vendor or "unknown")


@cache
def hardware_table() -> HardwareTable:
    """``snapbuild/data/hardware.yaml``, validated once per process."""
    text = resources.files("snapbuild").joinpath("data", "hardware.yaml").read_text("utf-8")
    return HardwareTable.model_validate(yaml.safe_load(text))


def vendor_name(vendor: str | None) -> str:
    """A vendor's name in the packaged table, for messages outside a selection (fleet advice,
    ``snapbuild new``); the selector names vendors by the table it was given."""
    return hardware_table().vendor_name(vendor)
