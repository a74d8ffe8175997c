"""How much memory a model needs at a context size: weights + KV cache + compute + overhead.

The KV cache is the part that grows with the context and the one that makes a model that
"fits" on disk run out of memory: 2 (K and V) x layers x KV heads x head size x context x bytes
per element, with sliding-window layers (Gemma 2/3) holding only their window. For llama.cpp the
compute buffer follows llama.cpp's own reservation rules (``snapbuild/data/llama_cpp_memory.yaml``,
applied in :mod:`snapbuild.estimate.llama`): it is what turns a model that fits at steady state
into one the OOM killer restarts once a long prompt arrives, so the selector plans for the peak.
Other families keep cautious constants (``snapbuild/data/estimate.yaml``).

Each family's rules implement one protocol (:class:`~snapbuild.estimate.shape.FamilyEstimator`)
and are looked up in one table, :func:`estimator`; this module puts them together into a
:class:`~snapbuild.estimate.shape.Breakdown` and, per device, a :class:`MemoryPlan`.
"""

from __future__ import annotations

from typing import Literal

from snapbuild.estimate.common import host_overhead
from snapbuild.estimate.generic import ConstantsEstimator
from snapbuild.estimate.llama import (
    LlamaEstimator,
    LlamaRun,
    compute_peak,
    compute_reserved,
    compute_steady,
    device_overhead,
    kv_bytes,
)
from snapbuild.estimate.shape import Breakdown, Family, FamilyEstimator, ModelShape
from snapcommon.model import KebabModel

Pool = Literal["ram", "vram"]

# the families with sizing rules of their own; every other family uses its constants
ESTIMATORS: dict[Family, FamilyEstimator] = {"llama.cpp": LlamaEstimator()}


def estimator(family: Family) -> FamilyEstimator:
    """The rules of ``family``: its own (llama.cpp) or its calibrated constants."""
    return ESTIMATORS.get(family) or ConstantsEstimator(family)


def kv_cache_bytes(shape: ModelShape, context_size: int, family: Family = "llama.cpp") -> int:
    """K and V for every layer; sliding-window layers hold their window plus one batch."""
    return estimator(family).kv_cache_bytes(shape, context_size)


def compute_bytes(
    shape: ModelShape, context_size: int, family: Family = "llama.cpp", *, peak: bool = False
) -> int:
    """What grows besides weights and KV. Steady state: vocabulary tables and logits (what a
    short prompt and decoding touch). ``peak``: plus one full batch's activations and attention
    scores, which a long prompt touches while it is processed."""
    return estimator(family).compute_bytes(shape, context_size, peak=peak)


def estimate(
    shape: ModelShape, context_size: int, family: Family = "llama.cpp", *, peak: bool = False
) -> Breakdown:
    """The memory ``shape`` needs at ``context_size`` on a runtime of ``family``; ``peak``
    includes the compute a full prompt batch touches (what the selector plans for)."""
    kv = kv_cache_bytes(shape, context_size, family)
    compute = compute_bytes(shape, context_size, family, peak=peak)
    overhead = host_overhead(shape, family)
    return Breakdown.of(shape.weights, kv, compute, overhead, context_size)


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

    return MemoryPlan(
        device=device,
        pool=pool,
        steady=Breakdown.of(shape.weights, kv, steady_c, overhead, context_size),
        peak=Breakdown.of(shape.weights, kv, peak_c, overhead, context_size),
        reserved_compute=reserved,
    )


def _with_overhead(b: Breakdown, overhead: int) -> Breakdown:
    total = b.weights + b.kv_cache + b.compute + overhead
    return b.model_copy(update={"overhead": overhead, "total": total})
