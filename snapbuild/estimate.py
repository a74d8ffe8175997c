"""How much memory a model needs at a context size: weights + KV cache + compute + overhead.

The KV cache is the part that grows with the context and the one that makes a model that
"fits" on disk run out of memory: 2 (K and V) x layers x KV heads x head size x context x bytes
per element, with sliding-window layers (Gemma 2/3) holding only their window. For llama.cpp the
compute buffer follows llama.cpp's own reservation rules (``snapbuild/data/llama_cpp_memory.yaml``,
applied in :mod:`snapbuild.estimate_llama`): it is what turns a model that fits at steady state
into one the OOM killer restarts once a long prompt arrives, so the selector plans for the peak.
Other families keep cautious constants (``snapbuild/data/estimate.yaml``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache

from pydantic import Field

from snapbuild.estimate_tables import (
    FamilyConstants,
    VocabularyRule,
    estimate_table,
    quantizations,
)
from snapbuild.manifest import ModelFacts
from snapcommon.model import KebabModel

Family = str  # "llama.cpp", "openvino", "onnxruntime"


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


class ModelShape(KebabModel):
    """What the estimate depends on: the attention layout and the weight bytes."""

    architecture: str
    kind: str = "chat"
    layers: int = Field(gt=0)
    attention_heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    key_size: int = Field(gt=0)
    value_size: int = Field(gt=0)
    embedding_size: int | None = None
    feed_forward_size: int | None = None
    vocab_size: int | None = None
    # BPE merges (None: unknown, counted as one per token, the BPE case; 0 for SentencePiece)
    vocab_merges: int | None = Field(default=None, ge=0)
    # token texts too long for std::string's inline buffer: malloc'ed bytes of one copy
    vocab_heap_bytes: int = Field(default=0, ge=0)
    context_length: int | None = None
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    weights: int = Field(ge=0)  # bytes of weights as loaded


class Breakdown(KebabModel):
    """An estimate in bytes; ``total`` is the sum, before any headroom."""

    total: int
    weights: int
    kv_cache: int
    compute: int
    overhead: int
    context_size: int


def shape_from_facts(facts: ModelFacts, weights: int) -> ModelShape | None:
    """A shape from a manifest's facts, or None when they are too thin for an estimate."""
    heads = facts.attention_heads
    layers = facts.layers
    if layers is None or heads is None:
        return None
    head_size = facts.head_size or (facts.embedding_size // heads if facts.embedding_size else None)
    if head_size is None:
        return None
    return ModelShape(
        architecture=facts.architecture,
        kind=facts.kind,
        layers=layers,
        attention_heads=heads,
        kv_heads=facts.kv_heads or heads,
        key_size=head_size,
        value_size=head_size,
        embedding_size=facts.embedding_size,
        feed_forward_size=facts.feed_forward_size,
        vocab_size=facts.vocab_size,
        vocab_merges=facts.vocab_merges,
        context_length=facts.context_length,
        sliding_window=facts.sliding_window,
        sliding_window_layers=facts.sliding_window_layers or 0,
        weights=weights,
    )


def padded_context(context_size: int, family: Family) -> int:
    """The context the runtime really allocates (llama.cpp pads it)."""
    pad = family_constants(family).context_padding
    return math.ceil(context_size / pad) * pad


def kv_cache_bytes(shape: ModelShape, context_size: int, family: Family = "llama.cpp") -> int:
    """K and V for every layer; sliding-window layers hold their window plus one batch."""
    if family == "llama.cpp":
        from snapbuild.estimate_llama import LlamaRun, kv_bytes

        return kv_bytes(shape, context_size, LlamaRun())
    consts = family_constants(family)
    per_elem = consts.kv_bytes_per_element
    if per_elem == 0 or shape.kind == "embeddings":
        return 0
    ctx = padded_context(context_size, family)
    swa = min(shape.sliding_window_layers, shape.layers) if shape.sliding_window else 0
    window_ctx = ctx
    if swa and shape.sliding_window:
        pad = consts.context_padding
        window_ctx = min(ctx, math.ceil((shape.sliding_window + consts.ubatch) / pad) * pad)
    per_token_layer = shape.kv_heads * (shape.key_size + shape.value_size) * per_elem
    cells = (shape.layers - swa) * ctx + swa * window_ctx
    return int(per_token_layer * cells)


def compute_bytes(
    shape: ModelShape, context_size: int, family: Family = "llama.cpp", *, peak: bool = False
) -> int:
    """What grows besides weights and KV. Steady state: vocabulary tables and logits (what a
    short prompt and decoding touch). ``peak``: plus one full batch's activations and attention
    scores, which a long prompt touches while it is processed."""
    if family == "llama.cpp":
        from snapbuild.estimate_llama import LlamaRun, compute_peak, compute_steady

        run = LlamaRun()
        return compute_peak(shape, context_size, run) if peak else compute_steady(shape, run)
    consts = family_constants(family)
    c = consts.compute
    total = c.vocab_bytes_per_token * (shape.vocab_size or 0)
    if not peak:
        return int(total)
    ubatch = consts.ubatch
    ctx = padded_context(context_size, family)
    embd = shape.embedding_size or shape.attention_heads * shape.key_size
    ff = shape.feed_forward_size or 4 * embd
    total += ubatch * (embd * c.peak_activation_bytes_per_embd)
    total += ubatch * (ff * c.peak_activation_bytes_per_ff)
    # queries x keys per head: a decoder's batch attends to the whole context; an encoder's
    # sentences attend to themselves
    queries = ctx if shape.kind == "embeddings" else ubatch
    total += (
        queries
        * ctx
        * shape.attention_heads
        * c.peak_score_bytes
        * (ubatch if shape.kind == "embeddings" else 1)
    )
    return int(total)


def estimate(
    shape: ModelShape, context_size: int, family: Family = "llama.cpp", *, peak: bool = False
) -> Breakdown:
    """The memory ``shape`` needs at ``context_size`` on a runtime of ``family``; ``peak``
    includes the compute a full prompt batch touches (what the selector plans for)."""
    kv = kv_cache_bytes(shape, context_size, family)
    compute = compute_bytes(shape, context_size, family, peak=peak)
    overhead = host_overhead(shape, family)
    return Breakdown(
        total=shape.weights + kv + compute + overhead,
        weights=shape.weights,
        kv_cache=kv,
        compute=compute,
        overhead=overhead,
        context_size=context_size,
    )


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
