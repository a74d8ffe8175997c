"""The concurrent-serving plan: the table agrees with the runtime catalog and with OpenVINO
GenAI itself, the number of sequences follows the memory fit exactly, and the selector records
the plan in the Decision that `serve` and the snap daemon hand to the adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.manifests import GEMMA3_4B
from support.tiny_models import write_tiny_openvino_gguf

from hwprobe import probe
from runtimes.catalog import load_catalog
from snapbuild.manifest.loader import load_manifest
from snapbuild.selection.decision import Batching, MemoryEstimate
from snapbuild.selection.selector import select
from snapbuild.serving.batching import (
    batching_table,
    kv_block_tokens,
    load_options,
    plan_batching,
)

GIB = 1 << 30
MIB = 1 << 20
MACHINES = Path(__file__).parent / "data" / "machines"


def _memory(available: int | None, required: int, kv: int) -> MemoryEstimate:
    return MemoryEstimate(
        weights=required // 2,
        kv_cache=kv,
        compute=0,
        overhead=0,
        required=required,
        available=available,
        pool="ram",
        context_size=4096,
    )


def test_table_covers_the_openvino_and_onnxruntime_runtimes_of_the_catalog() -> None:
    catalog = {e.id: e for e in load_catalog().runtimes}
    table = batching_table().runtimes
    planned = {i for i, e in catalog.items() if e.family in ("openvino", "onnxruntime")}
    assert set(table) == planned
    for runtime, rule in table.items():
        family, device = catalog[runtime].family, catalog[runtime].device
        if family == "onnxruntime":
            assert rule.mode == "micro-batch", runtime
        elif device == "npu":
            assert rule.mode == "one-at-a-time", runtime
        else:
            assert rule.mode == "continuous", runtime


def test_sequences_fill_the_memory_left_after_the_one_sequence_fit() -> None:
    # 4 GiB spare; each extra sequence needs its 512 MiB KV cache plus 10% headroom (563 MiB)
    plan = plan_batching("openvino-cpu", _memory(10 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert plan == Batching(
        mode="continuous",
        sequences=8,
        kv_cache_tokens=8 * 4096,
        kv_cache=8 * 512 * MIB,
        why="8 sequences of 4096 tokens (4.0 GiB of KV cache): 4.0 GiB free after the "
        "one-sequence fit holds 7 more 563 MiB KV caches",
    )
    two = plan_batching("openvino-cpu", _memory(7 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert two is not None and (two.sequences, two.kv_cache_tokens) == (2, 8192)
    none_spare = plan_batching("openvino-cpu", _memory(6 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert none_spare is not None and none_spare.sequences == 1


def test_sequences_are_capped_by_the_runtime() -> None:
    plan = plan_batching("openvino-cpu", _memory(100 * GIB, 6 * GIB, 512 * MIB), 2048)
    assert plan is not None
    assert (plan.sequences, plan.kv_cache_tokens) == (8, 8 * 2048)
    assert plan.why.endswith("holds 170 more 563 MiB KV caches, capped at the runtime's 8")


def test_unknown_memory_or_shape_plans_the_unverified_default() -> None:
    unknown_ram = plan_batching("openvino-gpu", _memory(None, 6 * GIB, 256 * MIB), 1024)
    assert unknown_ram == Batching(
        mode="continuous",
        sequences=2,
        kv_cache_tokens=2048,
        kv_cache=512 * MIB,
        why="2 sequences of 1024 tokens (512 MiB of KV cache): device memory unknown, "
        "fit not verified",
    )
    unknown_shape = plan_batching("openvino-cpu", _memory(10 * GIB, 6 * GIB, 0), 1024)
    assert unknown_shape is not None
    assert (unknown_shape.sequences, unknown_shape.kv_cache) == (2, None)


def test_npu_onnxruntime_and_llamacpp_plans() -> None:
    npu = plan_batching("openvino-npu", _memory(10 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert npu is not None and (npu.mode, npu.sequences) == ("one-at-a-time", 1)
    assert "static shapes" in npu.why
    onnx = plan_batching("onnxruntime-cpu", None, 512)
    assert onnx == Batching(
        mode="micro-batch",
        sequences=32,
        window_ms=5,
        why="concurrent requests gathered for up to 5 ms and run as one batch of at most 32 texts",
    )
    assert plan_batching("llama.cpp-cpu", None, 4096) is None  # planned as llama-server slots
    assert plan_batching("openvino-cpu", None, None) is None  # nothing fits: no plan


def test_load_options_carry_the_plan_to_the_adapter() -> None:
    assert load_options("openvino-cpu", None) == {}
    npu = plan_batching("openvino-npu", None, 4096)
    assert load_options("openvino-npu", npu) == {}
    cpu = plan_batching("openvino-cpu", _memory(7 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert load_options("openvino-cpu", cpu) == {"sequences": 2, "kv_block_tokens": 32}
    gpu = plan_batching("openvino-gpu", _memory(7 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert load_options("openvino-gpu", gpu) == {"sequences": 2, "kv_block_tokens": 16}
    onnx = plan_batching("onnxruntime-cpu", None, 512)
    assert load_options("onnxruntime-cpu", onnx) == {"sequences": 32, "batch_window_ms": 5.0}


def test_the_operators_slots_replace_the_planned_sequences() -> None:
    """``serve --slots``: another batch size, or one request at a time (1); an engine that
    cannot batch stays one at a time."""
    cpu = plan_batching("openvino-cpu", None, 4096)
    assert load_options("openvino-cpu", cpu, 4) == {"sequences": 4, "kv_block_tokens": 32}
    assert load_options("openvino-cpu", cpu, 1) == {}
    onnx = plan_batching("onnxruntime-cpu", None, 512)
    assert load_options("onnxruntime-cpu", onnx, 8) == {"sequences": 8, "batch_window_ms": 5.0}
    assert load_options("onnxruntime-cpu", onnx, 1) == {}
    assert load_options("openvino-npu", plan_batching("openvino-npu", None, 4096), 4) == {}


@pytest.mark.parametrize(("runtime", "blocks"), [("openvino-cpu", 256), ("openvino-gpu", 512)])
def test_the_adapter_sizes_its_paged_cache_from_the_block_size(
    runtime: str, blocks: int, tmp_path: Path
) -> None:
    """Two full 4096-token sequences, in the table's blocks of 32 (CPU) or 16 (GPU) tokens."""
    import openvino_genai

    from runtimes.engine import LoadOptions
    from runtimes.inprocess.openvino import OpenVinoAdapter

    plan = plan_batching(runtime, _memory(7 * GIB, 6 * GIB, 512 * MIB), 4096)
    assert plan is not None and plan.sequences == 2
    options = LoadOptions(
        artifact=tmp_path / "model.gguf",
        runtime=runtime,
        device=runtime.removeprefix("openvino-"),
        context_size=4096,
        **load_options(runtime, plan),
    )
    scheduler = OpenVinoAdapter(options)._scheduler(openvino_genai)
    assert (scheduler.max_num_seqs, scheduler.num_kv_blocks) == (2, blocks)


def test_continuous_batching_without_a_block_size_is_refused(tmp_path: Path) -> None:
    from runtimes.engine import LoadOptions
    from runtimes.inprocess.openvino import OpenVinoAdapter

    options = LoadOptions(artifact=tmp_path / "m.gguf", runtime="openvino-cpu", sequences=2)
    with pytest.raises(ValueError, match="needs LoadOptions.kv_block_tokens"):
        OpenVinoAdapter(options)


# the Arc A580 reads images too: gemma3's image encoder and projector take one sequence's room;
# the two iGPU machines serve gemma3 text only there (the encoder does not fit), as before
@pytest.mark.parametrize(
    ("machine", "sequences"),
    [("i7-2600k+arc-a580", 15), ("xps13-7390", 6), ("hp-zbook-power-16-inch-g11", 8)],
)
def test_the_decision_records_the_plan(machine: str, sequences: int) -> None:
    host = probe(root=MACHINES / machine / "machine-root")
    decision = select(load_manifest(GEMMA3_4B), host, engine="openvino-gpu")
    assert decision.selected is not None
    plan = decision.selected.batching
    candidate = decision.candidate("openvino-gpu")
    assert candidate is not None and candidate.batching == plan
    assert plan is not None and candidate.memory is not None
    assert plan.mode == "continuous" and plan.sequences == sequences
    assert plan.kv_cache_tokens == sequences * decision.selected.context_size
    assert plan.kv_cache == sequences * candidate.memory.kv_cache
    data = decision.to_data()["selected"]
    assert isinstance(data, dict) and data["batching"]["kv-cache-tokens"] == plan.kv_cache_tokens
    for other in decision.candidates:
        if other.runtime.startswith("llama.cpp"):
            assert other.batching is None


@pytest.mark.slow
def test_kv_block_size_matches_openvino_genai(tmp_path: Path) -> None:
    """One KV block holds exactly the table's tokens in the real pipeline: a request is ignored
    (out of cache) once its prompt and the tokens it generated fill the block (the newest
    token's keys are only stored at the next step, hence the - 1)."""
    import openvino_genai as ov

    model = write_tiny_openvino_gguf(tmp_path / "tiny.gguf")
    scheduler = ov.SchedulerConfig()
    scheduler.max_num_seqs = 1
    scheduler.num_kv_blocks = 1
    scheduler.enable_prefix_caching = False
    pipe = ov.ContinuousBatchingPipeline(str(model), scheduler, "CPU", {})
    config = ov.GenerationConfig()
    config.max_new_tokens = 200
    config.ignore_eos = True
    config.apply_chat_template = False
    prompt = "Hi"
    prompt_tokens = int(pipe.get_tokenizer().encode(prompt).input_ids.data.shape[1])
    handle = pipe.add_request(0, prompt, config)
    generated = 0
    while pipe.has_non_finished_requests():
        pipe.step()
        while handle.can_read():
            generated += sum(len(o.generated_ids) for o in handle.read().values())
    assert handle.get_status() == ov.GenerationStatus.IGNORED
    assert prompt_tokens + generated - 1 == kv_block_tokens("openvino-cpu") == 32
