"""The estimator's vocabulary, a leaf every other estimate module builds on: the model shape an
estimate depends on, the breakdown it answers, and the one protocol a runtime family's rules
implement (llama.cpp's in :mod:`snapbuild.estimate.llama`, the calibrated constants of the
others in :mod:`snapbuild.estimate.generic`), looked up in :mod:`snapbuild.estimate.memory`.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from snapbuild.manifest.model import Engine, Manifest, ModelFacts
from snapcommon.model import KebabModel

Family = str  # "llama.cpp", "openvino", "onnxruntime"


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

    @classmethod
    def of(
        cls, weights: int, kv_cache: int, compute: int, overhead: int, context_size: int
    ) -> Breakdown:
        """The breakdown of these parts, their sum as ``total``."""
        return cls(
            total=weights + kv_cache + compute + overhead,
            weights=weights,
            kv_cache=kv_cache,
            compute=compute,
            overhead=overhead,
            context_size=context_size,
        )


class FamilyEstimator(Protocol):
    """How one runtime family sizes what grows besides the weights."""

    def kv_cache_bytes(self, shape: ModelShape, context_size: int) -> int:
        """K and V for every layer at ``context_size``."""
        ...

    def compute_bytes(self, shape: ModelShape, context_size: int, *, peak: bool) -> int:
        """Compute buffers: steady state, or (``peak``) while a full prompt batch runs."""
        ...


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


def model_shape(manifest: Manifest, engine: Engine) -> ModelShape | None:
    """The shape of ``engine``'s model: the manifest's facts and its artifact's size."""
    return shape_from_facts(manifest.model, manifest.weights(engine).size)
