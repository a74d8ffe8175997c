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
from snapbuild.estimate import (
    ModelShape,
    compute_bytes,
    family_constants,
    kv_cache_bytes,
    with_headroom,
)


@cache
def serving_table() -> dict[str, Any]:
    """``snapbuild/data/serving.yaml``."""
    text = resources.files("snapbuild").joinpath("data", "serving.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def kv_types(flash_attention: bool) -> list[tuple[str, float]]:
    """KV-cache types allowed, best first, down to the quality floor; quantized types only
    with flash attention."""
    table = serving_table()
    out: list[tuple[str, float]] = []
    for entry in table["kv-cache-types"]:
        name, size = str(entry["name"]), float(entry["bytes-per-element"])
        if name != "f16" and not flash_attention:
            break
        out.append((name, size))
        if name == table["kv-quality-floor"]:
            break
    return out


def kv_bytes_per_element(name: str) -> float:
    """Bytes per element of a KV-cache type."""
    for entry in serving_table()["kv-cache-types"]:
        if entry["name"] == name:
            return float(entry["bytes-per-element"])
    raise KeyError(name)


@dataclass(frozen=True)
class Option:
    """One (KV type, slots) configuration and what it needs."""

    kv_type: str
    slots: int
    kv_cache: int
    required: int


def option(shape: ModelShape, context: int, kv_type: str, slots: int) -> Option:
    """What ``slots`` sequences of ``context`` tokens need with ``kv_type`` (llama-server
    without a unified KV cache gives each slot its own cells: slots x one sequence's KV)."""
    kv = slots * kv_cache_bytes(
        shape, context, "llama.cpp", bytes_per_element=kv_bytes_per_element(kv_type)
    )
    compute = compute_bytes(shape, context, "llama.cpp", peak=True)
    overhead = int(family_constants("llama.cpp")["overhead"])
    return Option(kv_type, slots, kv, with_headroom(shape.weights + kv + compute + overhead))


def plan(
    shape: ModelShape,
    context: int,
    *,
    runtime: str,
    device: str,
    available: int | None,
) -> Serving:
    """The serving configuration for ``context`` tokens per slot within ``available`` bytes
    (None: unknown, plan the preferred slots in f16)."""
    table = serving_table()
    flash = runtime in table["flash-attention"]
    preferred = int(table["preferred-slots"].get(device, 1))
    enough = int(table["quantize-below-slots"].get(device, 1))

    def fits(o: Option) -> bool:
        return available is None or o.required <= available

    best: Option | None = None
    for kv_type, _ in kv_types(flash):
        fitting = [
            o
            for o in (option(shape, context, kv_type, n) for n in range(preferred, 0, -1))
            if fits(o)
        ]
        if not fitting:
            continue
        top = fitting[0]
        if best is None or top.slots > best.slots:
            best = top
        if best.slots >= enough:
            break
    if best is None:  # the memory fit passed for one f16 slot, so this is the fallback
        best = option(shape, context, "f16", 1)
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
    gib = best.required / 2**30
    if available is None:
        return f"{best.slots} slots ({best.kv_type} KV), memory unknown: {gib:.2f} GiB planned"
    room = f"{gib:.2f} GiB of {available / 2**30:.2f} GiB"
    if best.slots == preferred and best.kv_type == "f16":
        return f"{best.slots} slots, the device's preferred number, fit in f16 ({room})"
    if best.kv_type != "f16":
        return f"{best.slots} slots fit only with a {best.kv_type} KV cache ({room})"
    return f"{best.slots} of the preferred {preferred} slots fit ({room})"
