"""The families without sizing rules of their own (OpenVINO, ONNX Runtime): cautious calibrated
constants (``snapbuild/data/estimate.yaml``) for the KV cache and the compute buffers."""

from __future__ import annotations

import math
from dataclasses import dataclass

from snapbuild.estimate.common import family_constants, padded_context
from snapbuild.estimate.shape import Family, ModelShape


@dataclass(frozen=True)
class ConstantsEstimator:
    """A :class:`~snapbuild.estimate.shape.FamilyEstimator` from one family's constants."""

    family: Family

    def kv_cache_bytes(self, shape: ModelShape, context_size: int) -> int:
        """K and V for every layer; sliding-window layers hold their window plus one batch."""
        consts = family_constants(self.family)
        per_elem = consts.kv_bytes_per_element
        if per_elem == 0 or shape.kind == "embeddings":
            return 0
        ctx = padded_context(context_size, self.family)
        swa = min(shape.sliding_window_layers, shape.layers) if shape.sliding_window else 0
        window_ctx = ctx
        if swa and shape.sliding_window:
            pad = consts.context_padding
            window_ctx = min(ctx, math.ceil((shape.sliding_window + consts.ubatch) / pad) * pad)
        per_token_layer = shape.kv_heads * (shape.key_size + shape.value_size) * per_elem
        cells = (shape.layers - swa) * ctx + swa * window_ctx
        return int(per_token_layer * cells)

    def compute_bytes(self, shape: ModelShape, context_size: int, *, peak: bool) -> int:
        """Steady state: vocabulary tables and logits (what a short prompt and decoding touch);
        ``peak``: plus one full batch's activations and attention scores."""
        consts = family_constants(self.family)
        c = consts.compute
        total = c.vocab_bytes_per_token * (shape.vocab_size or 0)
        if not peak:
            return int(total)
        ubatch = consts.ubatch
        ctx = padded_context(context_size, self.family)
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
