"""llama.cpp's memory, from its own sizing rules: KV cache per type and layout, compute buffers.

llama.cpp reserves one compute buffer, sized for the worst micro-batch (n_ubatch tokens against
the full KV cache, n_ubatch logit rows); a GPU allocates all of it at load, while on the CPU only
the pages a real graph writes become resident, so the CPU's peak is a full prompt batch at the
full context with one logit row per sequence, plus the CPU backend's separate work buffer (the
attention scores converted to f16 without flash attention). The rules and where each comes
from in llama.cpp are data (``snapbuild/data/llama_cpp_memory.yaml``, whose schema is
:class:`snapbuild.estimate.tables.LlamaMemoryTable`); this module only applies them.
Its steady and peak figures per device are put together by
:func:`snapbuild.estimate.memory.plan_memory`, which the selector calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import Field

from snapbuild.estimate.shape import ModelShape
from snapbuild.estimate.tables import KvType, llama_memory
from snapcommon.model import KebabModel


class LlamaRun(KebabModel):
    """How llama.cpp is run: the parameters its memory depends on (defaults: the binding's)."""

    slots: int = Field(default=1, ge=1)  # n_seq_max / llama-server --parallel
    kv_type: KvType = "f16"
    flash_attn: bool = False
    n_batch: int = Field(default=512, ge=1)
    n_ubatch: int = Field(default=512, ge=1)
    kv_unified: bool = True

    @classmethod
    def server(cls, slots: int = 4, kv_type: KvType = "f16") -> LlamaRun:
        """llama-server's defaults (``runs.server``) with ``slots`` parallel slots."""
        d = llama_memory().runs.server
        return cls(
            slots=slots,
            kv_type=kv_type,
            flash_attn=d.flash_attn,
            n_batch=d.n_batch,
            n_ubatch=d.n_ubatch,
        )


class Cells(KebabModel):
    """KV cells as llama.cpp lays them out: per stream, full and sliding-window caches."""

    streams: int
    full: int  # cells per stream of the full-context layers
    swa: int  # cells per stream of the sliding-window layers (0 without any)
    tokens: int  # the micro-batch the compute buffer is sized for


def _pad(n: int, to: int) -> int:
    return math.ceil(n / to) * to


def cells(shape: ModelShape, context_size: int, run: LlamaRun) -> Cells:
    """llama_context::llama_context and llama_kv_cache_iswa's rules (see the data file)."""
    kv = llama_memory().kv_cache
    pad = kv.cell_padding
    ctx = _pad(context_size, pad)
    unified = run.kv_unified or run.slots == 1
    streams = 1 if unified else run.slots
    per = ctx if unified else _pad(ctx // run.slots, pad)
    tokens = min(run.n_ubatch, run.n_batch, ctx)
    swa = 0
    if shape.sliding_window and shape.sliding_window_layers:
        window = shape.sliding_window * (run.slots if unified else 1) + tokens
        swa = _pad(min(per, window), kv.swa_padding)
    return Cells(streams=streams, full=per, swa=swa, tokens=tokens)


def kv_bytes(shape: ModelShape, context_size: int, run: LlamaRun) -> int:
    """K and V of every layer in the cache type, full layers at the context, local at theirs."""
    if shape.kind == "embeddings":
        return 0
    t = llama_memory().kv_cache.types[run.kv_type]
    c = cells(shape, context_size, run)
    swa_layers = min(shape.sliding_window_layers, shape.layers) if c.swa else 0
    elements = shape.kv_heads * (shape.key_size + shape.value_size)
    per_cell_layer = elements * t.block_bytes / t.block_elements
    layer_cells = (shape.layers - swa_layers) * c.full + swa_layers * c.swa
    return int(per_cell_layer * layer_cells * c.streams)


def _compute(shape: ModelShape, c: Cells, run: LlamaRun, outputs: int) -> int:
    """The largest set of tensors alive at once: an attention layer, a feed-forward layer, or
    the output (``compute`` in the data file)."""
    r = llama_memory().compute
    phases = r.flash_attn if run.flash_attn else r.no_flash_attn
    mask_bytes = r.mask_bytes.flash_attn if run.flash_attn else r.mask_bytes.no_flash_attn
    t = c.tokens
    embd = shape.embedding_size or shape.attention_heads * shape.key_size
    ff = shape.feed_forward_size or 4 * embd
    extra = r.extra_embd_rows.get(shape.architecture, 0.0)
    rows = {
        "embd": t * embd * 4,
        "kv": t * shape.kv_heads * shape.key_size * 4,
        "ff": t * ff * 4,
    }
    has_full = shape.layers > (shape.sliding_window_layers if c.swa else 0)
    widest = c.full if has_full else c.swa
    masks = t * mask_bytes * ((c.full if has_full else 0) + c.swa)
    sizes = {
        "scores": t * widest * shape.attention_heads * 4,
        "logits": outputs * (shape.vocab_size or 0) * 4,
        **rows,
    }
    best = 0.0
    for phase in (phases.attention, phases.feed_forward, phases.output):
        per_row = phase.rows()
        total = sum(per_row[k] * v for k, v in sizes.items())
        total += extra * rows["embd"]
        if phase.masks:
            total += masks
        best = max(best, total)
    return int(best)


def compute_reserved(shape: ModelShape, context_size: int, run: LlamaRun) -> int:
    """The compute buffer llama.cpp reserves and logs (``compute buffer size``)."""
    c = cells(shape, context_size, run)
    return _compute(shape, c, run, outputs=min(c.tokens, run.n_batch))


def _output_buffer(shape: ModelShape, run: LlamaRun) -> int:
    per_slot = llama_memory().compute.output_buffer_rows_per_slot
    return per_slot * run.slots * (shape.vocab_size or 0) * 4


def cpu_work_buffer(shape: ModelShape, c: Cells, run: LlamaRun) -> int:
    """The CPU backend's work buffer: the largest matrix product input it converts, the
    attention scores without flash attention (``cpu-work-buffer`` in the data file)."""
    work = llama_memory().cpu_work_buffer
    r = work.flash_attn if run.flash_attn else work.no_flash_attn
    embd = shape.embedding_size or shape.attention_heads * shape.key_size
    ff = shape.feed_forward_size or 4 * embd
    widest = c.full if shape.layers > (shape.sliding_window_layers if c.swa else 0) else c.swa
    scores = c.tokens * widest * shape.attention_heads * r.score_bytes
    return int(max(scores, c.tokens * ff * r.ff_bytes))


def compute_peak(shape: ModelShape, context_size: int, run: LlamaRun) -> int:
    """What the CPU makes resident at the worst moment: the last prompt batch of a full
    context (one logit row per sequence), its work buffer, and the host output buffer."""
    c = cells(shape, context_size, run)
    outputs = min(c.tokens, run.slots)
    graph = _compute(shape, c, run, outputs=outputs)
    return graph + cpu_work_buffer(shape, c, run) + _output_buffer(shape, run)


def compute_steady(shape: ModelShape, run: LlamaRun) -> int:
    """What a short prompt and decoding touch: a few tokens against the smallest KV view."""
    pad = llama_memory().kv_cache.cell_padding
    tokens = llama_memory().runs.steady_tokens
    c = Cells(streams=1, full=pad, swa=pad if shape.sliding_window else 0, tokens=tokens)
    graph = _compute(shape, c, run, outputs=1)
    return graph + cpu_work_buffer(shape, c, run) + _output_buffer(shape, run)


def device_overhead(device: str) -> int:
    """Runtime overhead of a device (CUDA context, BLAS workspace...), ``device-overhead``."""
    table = llama_memory().device_overhead
    if device not in table:
        raise KeyError(f"unknown device {device!r}; known: {', '.join(sorted(table))}")
    return table[device].bytes


def runtime_device(runtime_id: str) -> str:
    """The device-overhead key of a runtime id of runtimes/catalog.yaml."""
    return llama_memory().runtime_devices.get(runtime_id, "cpu")


@dataclass(frozen=True)
class LlamaEstimator:
    """llama.cpp's rules as a :class:`~snapbuild.estimate.shape.FamilyEstimator`, for one way
    of running it (``run``; default: the binding's)."""

    run: LlamaRun = field(default_factory=LlamaRun)

    def kv_cache_bytes(self, shape: ModelShape, context_size: int) -> int:
        """K and V for every layer, sliding-window layers holding their window."""
        return kv_bytes(shape, context_size, self.run)

    def compute_bytes(self, shape: ModelShape, context_size: int, *, peak: bool) -> int:
        """The compute buffer's resident part: steady state or a full prompt batch."""
        if peak:
            return compute_peak(shape, context_size, self.run)
        return compute_steady(shape, self.run)
