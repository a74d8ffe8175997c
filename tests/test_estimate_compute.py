"""llama.cpp's compute and KV buffers against the rules in snapbuild/data/llama_cpp_memory.yaml.

Generated GGUFs with realistic vocabularies (32k, 128k, 262k tokens: the logits of one 512-token
micro-batch are 62.5, 250 and 512 MiB) and narrow, tied embeddings (a few tens of MB on disk),
plus a gemma3 sliding-window layout and a wide feed-forward, are loaded by the real llama.cpp with
flash attention off and on; the ``compute buffer size`` and ``llama_kv_cache: size`` lines it
logs must agree with :func:`compute_reserved` and :func:`kv_bytes`. The shapes isolate each
term of the rules: the logits (big vocabularies), the score matrix (contexts 16384), the
feed-forward rows (ff 8192) and the masks (flash attention), so a rule that drifts fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.gguf_shapes import write_shape_gguf
from support.llama import captured_llama_log

from snapbuild.estimate.gguf_shape import read_gguf_shape
from snapbuild.estimate.llama import LlamaRun, compute_reserved, kv_bytes
from snapbuild.estimate.memory import plan_memory

llama_cpp = pytest.importorskip("llama_cpp")

COMPUTE = re.compile(r"compute buffer size =\s+([\d.]+) MiB")
KV = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB")
MIB = 2**20

SHAPES: dict[str, dict[str, Any]] = {
    "v32k": dict(embedding=256, layers=2, heads=4, kv_heads=2, feed_forward=512, vocab=32000),
    "v128k": dict(embedding=128, layers=2, heads=4, kv_heads=2, feed_forward=384, vocab=128256),
    "v262k-gemma3": dict(
        architecture="gemma3", sliding_window=512, embedding=64, layers=6, heads=2,
        kv_heads=1, feed_forward=256, vocab=262144,
    ),
    "ff8k": dict(embedding=1024, layers=2, heads=16, kv_heads=4, feed_forward=8192, vocab=1024),
    "gemma3-w1024": dict(
        architecture="gemma3", sliding_window=1024, embedding=512, layers=12, heads=8,
        kv_heads=4, feed_forward=2048, vocab=4096,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compute")
    return {
        name: write_shape_gguf(root / f"{name}.gguf", tied=True, **kw)
        for name, kw in SHAPES.items()
    }


@pytest.fixture
def llama_log() -> Iterator[list[str]]:
    """Everything llama.cpp logs while the fixture is active."""
    with captured_llama_log() as lines:
        yield lines


CASES = [
    ("v32k", 4096, False, "f16"),
    ("v32k", 16384, False, "f16"),
    ("v32k", 16384, True, "q8_0"),
    ("v128k", 4096, False, "f16"),
    ("v128k", 4096, True, "q4_0"),
    ("v262k-gemma3", 16384, False, "f16"),
    ("v262k-gemma3", 16384, True, "f16"),
    ("ff8k", 4096, False, "f16"),
    ("ff8k", 16384, True, "f16"),
    ("gemma3-w1024", 16384, False, "f16"),
    ("gemma3-w1024", 16384, True, "f16"),
]
GGML_TYPES = {"f16": 1, "q4_0": 2, "q8_0": 8}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "context", "flash", "kv_type"), CASES)
def test_logged_buffers_agree_with_the_rules(
    models: dict[str, Path],
    llama_log: list[str],
    name: str,
    context: int,
    flash: bool,
    kv_type: str,
) -> None:
    path = models[name]
    llm = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=context,
        n_threads=1,
        verbose=False,
        swa_full=False,
        flash_attn=flash,
        type_k=GGML_TYPES[kv_type],
        type_v=GGML_TYPES[kv_type],
    )
    del llm
    text = "".join(llama_log)
    compute = [float(x) for x in COMPUTE.findall(text)]
    kv = [float(x) for x in KV.findall(text)]
    assert len(compute) == 1 and kv, text[-3000:]
    shape = read_gguf_shape(path)
    run = LlamaRun(flash_attn=flash, kv_type=kv_type)  # type: ignore[arg-type]
    # the KV cache is exact (llama.cpp logs MiB with two decimals)
    assert sum(kv) == pytest.approx(kv_bytes(shape, context, run) / MIB, abs=0.01 * len(kv))
    # the compute buffer: the rules never under-estimate by more than 3.5 % (allocator
    # fragmentation, see the data file) and never over-estimate by more than 3.5 % or 2.5 MiB
    predicted = compute_reserved(shape, context, run) / MIB
    assert -0.035 <= (predicted - compute[0]) / compute[0] <= 0.035 or (
        0 <= predicted - compute[0] <= 2.5
    ), (predicted, compute[0])


def test_logits_dominate_a_large_vocabulary_at_every_context(models: dict[str, Path]) -> None:
    """The issue's Gemma 3 case: 262,144 tokens x 512 rows x f32 = 512 MiB at any context."""
    shape = read_gguf_shape(models["v262k-gemma3"])
    for context in (1024, 8192, 32768):
        assert compute_reserved(shape, context, LlamaRun()) >= 512 * MIB


def test_gpu_plans_count_the_reserved_buffer_and_the_device_overhead(
    models: dict[str, Path],
) -> None:
    shape = read_gguf_shape(models["v32k"])
    cpu = plan_memory(shape, 4096)
    cuda = plan_memory(shape, 4096, device="cuda")
    reserved = compute_reserved(shape, 4096, LlamaRun())
    assert cuda.peak.compute == cuda.steady.compute == reserved
    assert cuda.peak.overhead == 614_000_000
    assert cpu.peak.compute < reserved  # the CPU writes one logit row, not 512
    assert cpu.steady.total < cpu.peak.total


def test_server_slots_widen_the_sliding_window_cache(models: dict[str, Path]) -> None:
    """A unified cache keeps n_swa x slots + n_ubatch cells for local layers."""
    shape = read_gguf_shape(models["gemma3-w1024"])
    one = kv_bytes(shape, 32768, LlamaRun.server(slots=1))
    four = kv_bytes(shape, 32768, LlamaRun.server(slots=4))
    per_cell_layer = 4 * (64 + 64) * 2
    swa_layers = 10
    assert four - one == per_cell_layer * swa_layers * ((4 * 1024 + 512) - (1024 + 512))
