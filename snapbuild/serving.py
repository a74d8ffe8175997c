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

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from snapbuild.decision import Serving
from snapbuild.estimate import ModelShape, with_headroom
from snapbuild.estimate_llama import LlamaRun, Pool, plan_memory, rules, runtime_device
from snapcommon.sizes import gib


@cache
def serving_table() -> dict[str, Any]:
    """``snapbuild/data/serving.yaml``."""
    text = resources.files("snapbuild").joinpath("data", "serving.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def kv_types(flash_attention: bool) -> list[str]:
    """KV-cache types allowed, best first, down to the quality floor; quantized types only
    with flash attention."""
    table = serving_table()
    out: list[str] = []
    for name in table["kv-cache-types"]:
        if name != "f16" and not flash_attention:
            break
        out.append(str(name))
        if name == table["kv-quality-floor"]:
            break
    return out


@dataclass(frozen=True)
class Option:
    """One (KV type, slots) configuration and what it needs."""

    kv_type: str
    slots: int
    kv_cache: int
    required: int


def server_run(slots: int, kv_type: str, flash_attention: bool) -> LlamaRun:
    """How llama-server runs with this configuration (llama.cpp's memory depends on it):
    its batch sizes, and one KV stream per slot (``--no-kv-unified``)."""
    d = rules()["runs"]["server"]
    return LlamaRun(
        slots=slots,
        kv_type=kv_type,  # type: ignore[arg-type]
        flash_attn=flash_attention,
        n_batch=int(d["n-batch"]),
        n_ubatch=int(d["n-ubatch"]),
        kv_unified=False,
    )


def option(
    shape: ModelShape,
    context: int,
    kv_type: str,
    slots: int,
    *,
    runtime: str = "llama.cpp-cpu",
    flash_attention: bool = True,
    pool: Pool = "ram",
) -> Option:
    """What ``slots`` sequences of ``context`` tokens need with ``kv_type``, at the peak
    (llama.cpp's own sizing rules, :mod:`snapbuild.estimate_llama`)."""
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
    device: str,
    available: int | None,
    pool: str = "ram",
) -> Serving:
    """The serving configuration for ``context`` tokens per slot within ``available`` bytes
    (None: unknown, plan the preferred slots in f16)."""
    table = serving_table()
    flash = runtime in table["flash-attention"]
    preferred = int(table["preferred-slots"].get(device, 1))
    enough = int(table["quantize-below-slots"].get(device, 1))

    def fits(o: Option) -> bool:
        return available is None or o.required <= available

    where: Pool = "vram" if pool == "vram" else "ram"

    def sized(kv_type: str, slots: int) -> Option:
        return option(
            shape, context, kv_type, slots, runtime=runtime, flash_attention=flash, pool=where
        )

    best: Option | None = None
    for kv_type in kv_types(flash):
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
    return Serving(
        slots=best.slots,
        context_per_slot=context,
        kv_cache_type=best.kv_type,
        flash_attention=flash,
        cache_reuse=int(table["cache-reuse"]),
        kv_cache=best.kv_cache,
        required=best.required,
        why=_why(best, preferred, available),
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
