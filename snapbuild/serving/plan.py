"""The serving configuration of a llama.cpp engine: parallel slots, KV-cache type, flash
attention, prompt-cache reuse.

llama-server decodes every busy slot in one batched step, so under load N slots give up to N
times the tokens per second of one, for the price of N KV caches. The plan: the context per
slot is what the selector's memory fit chose for one sequence; then the most slots (up to the
device's preferred number, ``snapbuild/data/serving.yaml``) whose KV caches fit beside the
weights and compute buffers, in f16; only when f16 fits fewer slots than the device's
``quantize-below-slots``, a quantized KV cache (never below the quality floor, and only with
flash attention, which a quantized V cache needs) when it gives more slots than f16.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import Literal

from pydantic import NonNegativeInt, PositiveInt, model_validator

from snapbuild.estimate.common import with_headroom
from snapbuild.estimate.llama import KvType, LlamaRun, runtime_device
from snapbuild.estimate.memory import Pool, plan_memory
from snapbuild.estimate.shape import ModelShape, model_shape
from snapbuild.estimate.tables import llama_memory, read_data
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate, DeviceClass, MemoryEstimate, Selected, Serving
from snapcommon.model import KebabModel
from snapcommon.sizes import gib

MIB = 1 << 20


class ServingTable(KebabModel):
    """The whole of ``snapbuild/data/serving.yaml``."""

    schema_version: Literal[1]
    preferred_slots: dict[DeviceClass, PositiveInt]
    quantize_below_slots: dict[DeviceClass, PositiveInt]
    kv_cache_types: tuple[KvType, ...]  # best quality first
    kv_quality_floor: KvType
    flash_attention: tuple[str, ...]  # runtime ids of runtimes/catalog.yaml
    cache_reuse: NonNegativeInt
    prompt_cache_slots: dict[DeviceClass, NonNegativeInt]

    @model_validator(mode="after")
    def _consistent(self) -> ServingTable:
        """f16 comes first (the fallback, and the only type without flash attention), each type
        once, the floor among them."""
        types = self.kv_cache_types
        if not types or types[0] != "f16" or len(set(types)) != len(types):
            raise ValueError("kv-cache-types must start with f16 and list each type once")
        if self.kv_quality_floor not in types:
            raise ValueError(
                f"kv-quality-floor {self.kv_quality_floor} is not one of kv-cache-types"
            )
        return self


@cache
def serving_table() -> ServingTable:
    """``snapbuild/data/serving.yaml``, validated once per process."""
    return ServingTable.model_validate(read_data("serving.yaml"))


def kv_types(flash_attention: bool, table: ServingTable | None = None) -> list[KvType]:
    """KV-cache types allowed, best first, down to the quality floor; quantized types only
    with flash attention (``table``: the packaged one when None)."""
    table = table or serving_table()
    out: list[KvType] = []
    for name in table.kv_cache_types:
        if name != "f16" and not flash_attention:
            break
        out.append(name)
        if name == table.kv_quality_floor:
            break
    return out


@dataclass(frozen=True)
class Option:
    """One (KV type, slots) configuration and what it needs."""

    kv_type: KvType
    slots: int
    kv_cache: int
    required: int


def server_run(slots: int, kv_type: KvType, flash_attention: bool) -> LlamaRun:
    """How llama-server runs with this configuration (llama.cpp's memory depends on it):
    its batch sizes, and one KV stream per slot (``--no-kv-unified``)."""
    d = llama_memory().runs.server
    return LlamaRun(
        slots=slots,
        kv_type=kv_type,
        flash_attn=flash_attention,
        n_batch=d.n_batch,
        n_ubatch=d.n_ubatch,
        kv_unified=False,
    )


@lru_cache(maxsize=8192)
def option(
    shape: ModelShape,
    context: int,
    kv_type: KvType,
    slots: int,
    *,
    runtime: str = "llama.cpp-cpu",
    flash_attention: bool = True,
    pool: Pool = "ram",
) -> Option:
    """What ``slots`` sequences of ``context`` tokens need with ``kv_type``, at the peak
    (llama.cpp's own sizing rules, :mod:`snapbuild.estimate.llama`). Cached: a pure function
    of the model that every host of a fleet plan asks again."""
    run = server_run(slots, kv_type, flash_attention)
    peak = plan_memory(
        shape, slots * context, device=runtime_device(runtime), pool=pool, run=run
    ).peak
    return Option(kv_type, slots, peak.kv_cache, with_headroom(peak.total))


def plan(
    shape: ModelShape,
    context: int,
    *,
    runtime: str,
    device: DeviceClass,
    available: int | None,
    pool: str = "ram",
    table: ServingTable | None = None,
) -> Serving:
    """The serving configuration for ``context`` tokens per slot within ``available`` bytes
    (None: unknown, plan the preferred slots in f16), by ``table`` (None: the packaged one;
    the selector passes the one it was given)."""
    table = table or serving_table()
    flash = runtime in table.flash_attention
    preferred = table.preferred_slots.get(device, 1)
    enough = table.quantize_below_slots.get(device, 1)

    def fits(o: Option) -> bool:
        return available is None or o.required <= available

    where: Pool = "vram" if pool == "vram" else "ram"

    def sized(kv_type: KvType, slots: int) -> Option:
        return option(
            shape, context, kv_type, slots, runtime=runtime, flash_attention=flash, pool=where
        )

    best: Option | None = None
    for kv_type in kv_types(flash, table):
        fitting = [o for o in (sized(kv_type, n) for n in range(preferred, 0, -1)) if fits(o)]
        if not fitting:
            continue
        top = fitting[0]
        if best is None or top.slots > best.slots:
            best = top
        if best.slots >= enough:
            break
    if best is None:  # the memory fit passed for one sequence, so this is the fallback
        best = sized("f16", 1)
    cache = prompt_cache(best, table.prompt_cache_slots.get(device, 0), available, where)
    best = replace(best, required=best.required + (cache if where == "ram" else 0))
    return Serving(
        slots=best.slots,
        context_per_slot=context,
        kv_cache_type=best.kv_type,
        flash_attention=flash,
        cache_reuse=table.cache_reuse,
        kv_cache=best.kv_cache,
        required=best.required,
        why=_why(best, preferred, available),
        prompt_cache=cache,
    )


def prompt_cache(best: Option, slots: int, available: int | None, pool: Pool) -> int:
    """Bytes of llama-server's prompt cache: ``slots`` slots' KV cache, within what ``available``
    leaves beside ``best`` when the cache shares that memory (host RAM; a GPU plan's cache is in
    RAM, beside its VRAM), in whole MiB (--cache-ram's unit; 0 turns it off)."""
    wanted = best.kv_cache // best.slots * slots
    if pool == "ram" and available is not None:
        wanted = min(wanted, max(available - best.required, 0))
    return wanted // MIB * MIB


def serving_plan(
    manifest: Manifest,
    selected: Selected,
    context: int,
    memory: MemoryEstimate | None,
    table: ServingTable | None = None,
) -> Serving | None:
    """llama-server's slots and KV type for ``context`` tokens per slot: the Decision's plan at
    the selector's context; at an operator's context, planned again by the selector's own rule
    (:func:`plan`) in the memory the Decision saw (``memory``, the winner's
    estimate), so a larger context runs fewer slots instead of multiplying past what fits."""
    planned = selected.serving
    if planned is None or context == planned.context_per_slot:
        return planned

    engine = manifest.engine(selected.engine)
    shape = model_shape(manifest, engine) if engine is not None else None
    if engine is None or shape is None:  # no shape facts to size it with: keep the slots
        return planned.model_copy(update={"context_per_slot": context})
    return plan(
        shape,
        context,
        runtime=engine.runtime,
        device=selected.device,
        available=memory.available if memory else None,
        pool=memory.pool if memory else "ram",
        table=table,
    )


def forced_plan(manifest: Manifest, candidate: Candidate) -> Serving | None:
    """llama-server's plan for an engine the selector rejected and an operator forced
    (``use-engine E --force``): the selector's rule in the memory its judging saw on the
    engine's device (a software Vulkan device's reported memory, say). None when there is
    nothing to plan with (no memory fit, no model shape, not served by llama-server)."""
    from runtimes.catalog import load_catalog

    engine = manifest.engine(candidate.engine)
    entry = load_catalog().get(candidate.runtime)
    shape = model_shape(manifest, engine) if engine is not None else None
    memory = candidate.memory
    if shape is None or memory is None or entry is None or entry.serving != "llama-server":
        return None
    return plan(
        shape,
        memory.context_size,
        runtime=candidate.runtime,
        device=candidate.device,
        available=memory.available,
        pool=memory.pool,
    )


def _why(best: Option, preferred: int, available: int | None) -> str:
    planned = gib(best.required, digits=2)
    if available is None:
        return f"{best.slots} slots ({best.kv_type} KV), memory unknown: {planned} planned"
    room = f"{planned} of {gib(available, digits=2)}"
    if best.slots == preferred and best.kv_type == "f16":
        return f"{best.slots} slots, the device's preferred number, fit in f16 ({room})"
    if best.kv_type != "f16":
        return f"{best.slots} slots fit only with a {best.kv_type} KV cache ({room})"
    return f"{best.slots} of the preferred {preferred} slots fit ({room})"
