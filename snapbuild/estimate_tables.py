"""The estimator's data, typed: ``snapbuild/data/estimate.yaml`` and ``quantization.yaml``.

Both files are knowledge kept apart from code (calibrated constants with their measurements, bits
per weight with their block layouts). These models are their schemas, so a misspelt key or a
constant written as text fails once, when the file is loaded (cached per process), rather than as
a KeyError or a wrong figure in the middle of an estimate. ``tests/test_selector_data.py`` checks
that code, catalog and shipped manifests agree with them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from snapbuild.manifest import ArtifactFormat
from snapcommon.model import KebabModel


def read_data(name: str) -> Any:
    """A YAML file of ``snapbuild/data`` as plain data (validate it before use)."""
    text = resources.files("snapbuild").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


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
