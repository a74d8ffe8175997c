"""The estimator's data, typed: ``snapbuild/data/estimate.yaml``, ``quantization.yaml`` and
``llama_cpp_memory.yaml``.

The files are knowledge kept apart from code (calibrated constants with their measurements, bits
per weight with their block layouts). These models are their schemas, so a misspelt key or a
constant written as text fails once, when the file is loaded (cached per process), rather than as
a KeyError or a wrong figure in the middle of an estimate. ``tests/test_selector_data.py`` checks
that code, catalog and shipped manifests agree with them.
"""

from __future__ import annotations

from functools import cache
from typing import Literal, get_args

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from snapbuild.manifest.model import ArtifactFormat
from snapbuild.paths import read_data
from snapcommon.model import KebabModel


class Quantization(KebabModel):
    """Bits stored per weight, and the artifact formats the name is used with."""

    bits: PositiveFloat
    formats: tuple[ArtifactFormat, ...]


class QuantizationTable(KebabModel):
    """The whole of ``quantization.yaml``."""

    schema_version: Literal[1]
    quantizations: dict[str, Quantization]


class ComputeConstants(KebabModel):
    """Cautious compute-buffer constants of a family not modelled from its source."""

    vocab_bytes_per_token: NonNegativeFloat
    peak_activation_bytes_per_embd: NonNegativeFloat
    peak_activation_bytes_per_ff: NonNegativeFloat
    peak_score_bytes: NonNegativeFloat


class VocabularyRule(KebabModel):
    """llama.cpp's vocabulary tables in host memory (per token, per merge, long texts)."""

    bytes_per_token: NonNegativeInt
    bytes_per_merge: NonNegativeInt
    inline_string_chars: NonNegativeInt
    long_string_copies: NonNegativeInt
    malloc_header: NonNegativeInt
    malloc_align: PositiveInt


class FamilyConstants(KebabModel):
    """The constants of one runtime family."""

    kv_bytes_per_element: NonNegativeFloat
    context_padding: PositiveInt
    ubatch: PositiveInt
    compute: ComputeConstants
    overhead: NonNegativeInt
    vocabulary: VocabularyRule | None = None


class EstimateTable(KebabModel):
    """The whole of ``estimate.yaml``."""

    schema_version: Literal[1]
    headroom_fraction: float = Field(ge=0, lt=1)
    families: dict[str, FamilyConstants]

    @model_validator(mode="after")
    def _llama_cpp_complete(self) -> EstimateTable:
        """llama.cpp is the fallback family and the one whose vocabulary tables are counted."""
        llama = self.families.get("llama.cpp")
        if llama is None or llama.vocabulary is None:
            raise ValueError("families needs llama.cpp, with its vocabulary rule")
        return self


@cache
def estimate_table() -> EstimateTable:
    """``estimate.yaml``, validated once per process."""
    return EstimateTable.model_validate(read_data("estimate.yaml"))


@cache
def quantizations() -> dict[str, Quantization]:
    """``quantization.yaml``'s entries, validated once per process."""
    return QuantizationTable.model_validate(read_data("quantization.yaml")).quantizations


# --------------------------------------------------------------------------- llama.cpp's rules

# The KV-cache element types snapbuild plans with: ggml types llama.cpp accepts for
# --cache-type-k/-v, each needing its block layout in ``llama_cpp_memory.yaml``.
KvType = Literal["f16", "q8_0", "q4_0"]


class KvTypeLayout(KebabModel):
    """A ggml type's block: bytes per block and elements per block (ggml.c type_traits)."""

    block_bytes: PositiveInt
    block_elements: PositiveInt


class KvCacheRules(KebabModel):
    """How llama.cpp pads and stores its KV cells."""

    cell_padding: PositiveInt
    swa_padding: PositiveInt
    types: dict[KvType, KvTypeLayout]

    @model_validator(mode="after")
    def _every_type(self) -> KvCacheRules:
        """A KV type the selector may plan with must have its block layout."""
        missing = [t for t in get_args(KvType) if t not in self.types]
        if missing:
            raise ValueError(f"types lacks the block layout of {', '.join(missing)}")
        return self


class RunDefaults(KebabModel):
    """How one way of running llama.cpp configures it by default."""

    n_batch: PositiveInt
    n_ubatch: PositiveInt
    flash_attn: bool


class Runs(KebabModel):
    """The binding's and llama-server's defaults, and what a short chat prompt touches."""

    binding: RunDefaults
    server: RunDefaults
    steady_tokens: PositiveInt


class Phase(KebabModel):
    """f32 rows per token of each width alive at one moment of the graph."""

    scores: NonNegativeFloat = 0
    embd: NonNegativeFloat = 0
    kv: NonNegativeFloat = 0
    ff: NonNegativeFloat = 0
    logits: NonNegativeFloat = 0
    masks: bool = False  # the KQ masks are alive too

    def rows(self) -> dict[str, float]:
        """Rows per width name, the names :func:`snapbuild.estimate.llama` sizes."""
        return {k: getattr(self, k) for k in ("scores", "embd", "kv", "ff", "logits")}


class Phases(KebabModel):
    """The three moments that decide the compute buffer."""

    attention: Phase
    feed_forward: Phase
    output: Phase


class MaskBytes(KebabModel):
    """Bytes per KQ-mask element: f16 with flash attention, f32 without."""

    flash_attn: PositiveInt
    no_flash_attn: PositiveInt


class ComputeRules(KebabModel):
    """The compute buffer's rules (``compute`` in the data file)."""

    mask_bytes: MaskBytes
    no_flash_attn: Phases
    flash_attn: Phases
    extra_embd_rows: dict[str, NonNegativeFloat]  # architecture -> more embd rows per phase
    output_buffer_rows_per_slot: NonNegativeInt


class WorkBuffer(KebabModel):
    """Bytes per element the CPU backend converts: attention scores, feed-forward rows."""

    score_bytes: NonNegativeFloat
    ff_bytes: NonNegativeFloat


class WorkBufferRules(KebabModel):
    """The CPU backend's work buffer, with and without flash attention."""

    no_flash_attn: WorkBuffer
    flash_attn: WorkBuffer


class DeviceOverhead(KebabModel):
    """Memory a device's runtime takes besides the model's buffers, and where it comes from."""

    bytes: NonNegativeInt
    measured: bool
    source: str


class LlamaMemoryTable(KebabModel):
    """The whole of ``llama_cpp_memory.yaml``."""

    schema_version: Literal[1]
    source: str
    kv_cache: KvCacheRules
    runs: Runs
    compute: ComputeRules
    cpu_work_buffer: WorkBufferRules
    device_overhead: dict[str, DeviceOverhead]
    runtime_devices: dict[str, str]  # runtime id of runtimes/catalog.yaml -> device

    @model_validator(mode="after")
    def _devices_known(self) -> LlamaMemoryTable:
        """``cpu`` is the fallback device, and every runtime pays a listed device's overhead."""
        if "cpu" not in self.device_overhead:
            raise ValueError("device-overhead needs a 'cpu' entry (the fallback)")
        unknown = sorted(
            f"{runtime}: {device}"
            for runtime, device in self.runtime_devices.items()
            if device not in self.device_overhead
        )
        if unknown:
            raise ValueError(
                f"runtime-devices names devices device-overhead lacks: {', '.join(unknown)}"
            )
        return self


@cache
def llama_memory() -> LlamaMemoryTable:
    """``llama_cpp_memory.yaml``, validated once per process."""
    return LlamaMemoryTable.model_validate(read_data("llama_cpp_memory.yaml"))
