"""The estimator's shared rules: bits per weight by quantization, each family's calibrated
constants, the host overhead (vocabulary tables included) and the selector's headroom."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache

from snapbuild.estimate.shape import Family, ModelShape
from snapbuild.estimate.tables import (
    FamilyConstants,
    VocabularyRule,
    estimate_table,
    quantizations,
)


@cache
def quantization_table() -> dict[str, float]:
    """Quantization name -> bits per weight (``snapbuild/data/quantization.yaml``)."""
    return {name: entry.bits for name, entry in quantizations().items()}


def quantization_bits(name: str) -> float:
    """Bits per weight of a quantization; 0 for an unknown name (ranks it last)."""
    return quantization_table().get(name, 0.0)


def headroom_fraction() -> float:
    """The safety margin the selector adds on top of an estimate."""
    return estimate_table().headroom_fraction


def family_constants(family: Family) -> FamilyConstants:
    """The calibrated constants of one runtime family (llama.cpp's for an unknown one)."""
    families = estimate_table().families
    return families.get(family) or families["llama.cpp"]


def _vocabulary() -> VocabularyRule:
    rule = family_constants("llama.cpp").vocabulary
    assert rule is not None  # EstimateTable checks it
    return rule


def padded_context(context_size: int, family: Family) -> int:
    """The context the runtime really allocates (llama.cpp pads it)."""
    pad = family_constants(family).context_padding
    return math.ceil(context_size / pad) * pad


def host_overhead(shape: ModelShape | None, family: Family = "llama.cpp") -> int:
    """Host memory the runtime takes besides weights, KV and compute: a fixed part and, for
    llama.cpp, the vocabulary tables (``vocabulary`` in the data: per token, per BPE merge and
    the heap copies of long token texts)."""
    consts = family_constants(family)
    fixed = consts.overhead
    rule = consts.vocabulary
    if shape is None or rule is None or not shape.vocab_size:
        return fixed
    tokens = shape.vocab_size
    merges = tokens if shape.vocab_merges is None else shape.vocab_merges
    tables = rule.bytes_per_token * tokens + rule.bytes_per_merge * merges
    return fixed + tables + rule.long_string_copies * shape.vocab_heap_bytes


def token_heap_bytes(lengths: Iterable[int]) -> int:
    """malloc'ed bytes of one copy of these token texts: those longer than std::string's inline
    buffer take a glibc chunk of length + 1 + header, rounded up (``vocabulary`` in the data)."""
    rule = _vocabulary()
    inline, header, align = rule.inline_string_chars, rule.malloc_header, rule.malloc_align
    return sum(math.ceil((n + 1 + header) / align) * align for n in lengths if n > inline)


def with_headroom(total: int) -> int:
    """What the selector asks the host for: the estimate plus the safety margin."""
    return int(math.ceil(total * (1.0 + headroom_fraction())))
