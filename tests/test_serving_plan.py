"""The selector's serving configuration for llama.cpp engines: slots, KV-cache type, flash
attention; the data table agrees with ggml's block sizes and the runtime catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import pytest
from pydantic import ValidationError

from runtimes.catalog import load_catalog
from runtimes.llamaserver.supervisor import ServingConfig, from_plan
from snapbuild.estimate.shape import shape_from_facts
from snapbuild.estimate.tables import llama_memory, read_data
from snapbuild.manifest.loader import load_manifest
from snapbuild.serving.plan import ServingTable, kv_types, option, plan, serving_table

GIB = 2**30


def _smol_shape():  # type: ignore[no-untyped-def]
    manifest = load_manifest("smollm2")
    shape = shape_from_facts(manifest.model, 100_000_000)
    assert shape is not None
    return shape


def test_kv_types_are_llama_cpps_with_ggml_block_sizes() -> None:
    sizes = llama_memory().kv_cache.types
    for name in serving_table().kv_cache_types:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name.upper()]]
        assert (sizes[name].block_elements, sizes[name].block_bytes) == (block, size), name
    assert serving_table().kv_quality_floor in serving_table().kv_cache_types


def _serving_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = read_data("serving.yaml")
    return {**data, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kv-quality-floor": "q4_0", "kv-cache-types": ["f16", "q8_0"]}, "kv-quality-floor q4_0 "),
        ({"kv-cache-types": ["q8_0", "f16"]}, "must start with f16"),
        ({"kv-cache-types": ["f16", "q5_1"]}, "kv-cache-types.1\n  Input should be 'f16'"),
        ({"preferred-slots": {"cpu": 0}}, "preferred-slots.cpu\n  Input should be greater"),
        ({"preferred-slots": {"tpu": 2}}, r"preferred-slots.tpu.\[key\]\n  Input should be"),
        ({"cache-reuse": "lots"}, "cache-reuse\n  Input should be a valid integer"),
    ],
)
def test_a_broken_serving_table_is_rejected(changes: dict[str, Any], message: str) -> None:
    assert ServingTable.model_validate(_serving_data()) == serving_table()
    with pytest.raises(ValidationError, match=message):
        ServingTable.model_validate(_serving_data(**changes))


def test_flash_attention_and_catalog_agree() -> None:
    catalog = load_catalog()
    llama_ids = {e.id for e in catalog.runtimes if e.serving == "llama-server"}
    assert set(serving_table().flash_attention) <= llama_ids
    assert {e.family for e in catalog.runtimes if e.serving == "llama-server"} == {"llama.cpp"}


def test_quality_floor_and_flash_attention_gate_quantized_caches() -> None:
    assert kv_types(True) == ["f16", "q8_0"]  # q4_0 is below the floor
    assert kv_types(False) == ["f16"]  # a quantized V needs flash attention


def test_slots_scale_the_kv_cache() -> None:
    shape = _smol_shape()
    one, four = option(shape, 4096, "f16", 1), option(shape, 4096, "f16", 4)
    assert four.kv_cache == 4 * one.kv_cache == 4 * 94_371_840
    q8 = option(shape, 4096, "q8_0", 4)
    assert q8.kv_cache == 4 * 2 * 30 * 3 * 64 * 4096 * 34 // 32


def test_plan_with_room_takes_the_preferred_slots_in_f16() -> None:
    serving = plan(_smol_shape(), 4096, runtime="llama.cpp-cpu", device="cpu", available=8 * GIB)
    assert (serving.slots, serving.kv_cache_type, serving.flash_attention) == (8, "f16", True)
    assert serving.context_per_slot == 4096 and serving.cache_reuse == 256
    gpu = plan(_smol_shape(), 4096, runtime="llama.cpp-cuda", device="gpu", available=8 * GIB)
    assert gpu.slots == 16


@pytest.mark.parametrize("slots_f16", [1, 2, 3])
def test_plan_when_tight(slots_f16: int) -> None:
    """Exactly ``slots_f16`` f16 slots fit: below the CPU's 2, q8_0 takes over if it fits
    more; from 2 on, f16 stays."""
    shape = _smol_shape()
    budget = option(shape, 4096, "f16", slots_f16 + 1).required - 1  # just short of one more
    serving = plan(shape, 4096, runtime="llama.cpp-cpu", device="cpu", available=budget)
    if slots_f16 < 2:
        q8_slots = max(n for n in range(1, 9) if option(shape, 4096, "q8_0", n).required <= budget)
        assert (serving.kv_cache_type, serving.slots) == ("q8_0", q8_slots)
        assert q8_slots > slots_f16
    else:
        assert (serving.kv_cache_type, serving.slots) == ("f16", slots_f16)
    assert serving.required <= budget


def test_without_flash_attention_the_cache_stays_f16() -> None:
    shape = _smol_shape()
    budget = option(shape, 4096, "f16", 1, flash_attention=False).required
    serving = plan(shape, 4096, runtime="llama.cpp-vulkan-nofa", device="cpu", available=budget)
    assert (serving.kv_cache_type, serving.slots, serving.flash_attention) == ("f16", 1, False)


def test_plan_becomes_llama_server_flags() -> None:
    serving = plan(_smol_shape(), 2048, runtime="llama.cpp-cpu", device="cpu", available=None)
    assert from_plan(serving, threads=2) == ServingConfig(
        slots=8,
        context_per_slot=2048,
        kv_cache_type="f16",
        flash_attention=True,
        cache_reuse=256,
        threads=2,
        prompt_cache_mib=45,  # one slot's f16 KV cache at 2048 tokens
    )


def test_the_prompt_cache_is_planned_and_counted() -> None:
    """llama-server's prompt cache (--cache-ram; its default 8 GiB is in no plan) gets one
    slot's KV cache, only from memory the slots leave, and counts in what the plan requires."""
    shape = _smol_shape()
    free = plan(shape, 2048, runtime="llama.cpp-cpu", device="cpu", available=None)
    assert free.prompt_cache == free.kv_cache // free.slots // (1 << 20) * (1 << 20)
    assert free.required == option(shape, 2048, "f16", free.slots).required + free.prompt_cache
    room = option(shape, 2048, "f16", 8).required + (10 << 20)
    tight = plan(shape, 2048, runtime="llama.cpp-cpu", device="cpu", available=room)
    assert (tight.slots, tight.prompt_cache) == (8, 10 << 20)
    assert tight.required <= room
    gpu = plan(shape, 2048, runtime="llama.cpp-cuda", device="gpu", available=room, pool="vram")
    assert (
        gpu.prompt_cache > 0
        and gpu.required
        == option(
            shape, 2048, gpu.kv_cache_type, gpu.slots, runtime="llama.cpp-cuda", pool="vram"
        ).required
    )  # in host RAM: not counted against the GPU's memory
    assert (
        "no prompt cache"
        in plan(shape, 2048, runtime="llama.cpp-cpu", device="npu", available=None).summary()
    )


def test_an_operators_context_is_planned_again_in_the_same_memory() -> None:
    """`<snap> set context-size=` and `serve --context-size`: the slots that fit at that context,
    in the memory the Decision saw (a 2 GiB GPU), not the selector's slots at a larger context."""
    import hwprobe
    from snapbuild.selection.selector import select
    from snapbuild.serving.launch import serve_options
    from snapbuild.serving.plan import serving_plan

    root = Path(__file__).parent / "data" / "machines" / "hp-pavilion-15-cs-3037nl" / "machine-root"
    manifest = load_manifest("smollm2")
    decision = select(manifest, hwprobe.probe(str(root)))
    selected = decision.selected
    assert selected is not None and selected.serving is not None
    winner = decision.candidate(selected.engine)
    assert winner is not None and winner.memory is not None
    at_selectors = (selected.engine, selected.context_size, selected.serving.slots)
    assert at_selectors == ("cuda", 4096, 12)
    assert serving_plan(manifest, selected, 4096, winner.memory) is selected.serving
    doubled = serving_plan(manifest, selected, 8192, winner.memory)
    assert doubled is not None
    assert (doubled.context_per_slot, doubled.slots, doubled.kv_cache_type) == (8192, 6, "f16")
    assert doubled.required <= (winner.memory.available or 0) < selected.serving.required * 2
    options = serve_options(
        manifest, selected, artifact=Path("m.gguf"), context_size=8192, memory=winner.memory
    )
    assert options.serving is not None
    assert (options.serving.slots, options.serving.context_per_slot) == (6, 8192)
