"""llama.cpp's memory, from its own sizing rules: KV cache per type and layout, compute buffers.

llama.cpp reserves one compute buffer, sized for the worst micro-batch (n_ubatch tokens against
the full KV cache, n_ubatch logit rows); a GPU allocates all of it at load, while on the CPU only
the pages a real graph writes become resident, so the CPU's peak is a full prompt batch at the
full context with one logit row per sequence, plus the CPU backend's separate work buffer (the
attention scores converted to f16 without flash attention). The rules and where each comes
from in llama.cpp are data (``snapbuild/data/llama_cpp_memory.yaml``, whose schema is
:class:`snapbuild.estimate_tables.LlamaMemoryTable`); this module only applies them.
:func:`plan_memory` is what the selector calls: steady state and peak, per device.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from snapbuild.estimate import (
    Breakdown,
    Family,
    ModelShape,
    estimate,
    host_overhead,
)
from snapbuild.estimate_tables import KvType, llama_memory
from snapcommon.model import KebabModel

Pool = Literal["ram", "vram"]


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


class MemoryPlan(KebabModel):
    """Steady state and peak of one engine on one device, each a full breakdown."""

    device: str
    pool: Pool
    steady: Breakdown
    peak: Breakdown
    reserved_compute: int  # llama.cpp's logged compute buffer (0 for other families)


def plan_memory(
    shape: ModelShape,
    context_size: int,
    family: Family = "llama.cpp",
    *,
    device: str = "cpu",
    pool: Pool | None = None,
    run: LlamaRun | None = None,
) -> MemoryPlan:
    """Steady and peak memory of ``shape`` at ``context_size`` on ``device``.

    ``pool`` is where the buffers live: ``vram`` for a discrete GPU (the whole reserved compute
    buffer and the device overhead count, host-side tables do not), ``ram`` otherwise (the CPU
    only makes written pages resident; an integrated GPU's allocations are committed RAM).
    """
    run = run or LlamaRun()
    pool = pool or ("ram" if device == "cpu" else "vram")
    dev = device_overhead(device)
    host = host_overhead(shape, family) if pool == "ram" else 0
    if family != "llama.cpp":
        s = estimate(shape, context_size, family)
        p = estimate(shape, context_size, family, peak=True)
        return MemoryPlan(
            device=device,
            pool=pool,
            steady=_with_overhead(s, host + dev),
            peak=_with_overhead(p, host + dev),
            reserved_compute=0,
        )
    kv = kv_bytes(shape, context_size, run)
    reserved = compute_reserved(shape, context_size, run)
    if device == "cpu":
        steady_c, peak_c = compute_steady(shape, run), compute_peak(shape, context_size, run)
    else:  # a GPU backend allocates the reserved buffer at load
        steady_c = peak_c = reserved
    overhead = host + dev

    def part(compute: int) -> Breakdown:
        return Breakdown(
            total=shape.weights + kv + compute + overhead,
            weights=shape.weights,
            kv_cache=kv,
            compute=compute,
            overhead=overhead,
            context_size=context_size,
        )

    return MemoryPlan(
        device=device,
        pool=pool,
        steady=part(steady_c),
        peak=part(peak_c),
        reserved_compute=reserved,
    )


def _with_overhead(b: Breakdown, overhead: int) -> Breakdown:
    total = b.weights + b.kv_cache + b.compute + overhead
    return b.model_copy(update={"overhead": overhead, "total": total})
